// What the trial benchmarks share: a trivial pinned pack (it defines nothing,
// and a trial of it with no scenario completes at once) and a recorded run of
// chat messages to fork. Header-only; not a benchmark of its own (only
// bench/*_bench.cc are).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "pack/bundle_hash.h"
#include "sandbox/trial_types.h"
#include "store/event_store.h"

namespace forktrial::bench {

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// Writes the trivial pack into `dir` and returns it as a pinned source.
inline sandbox::PackSource write_trivial_pack(const std::filesystem::path& dir) {
  write_file(dir / "pack.lua",
             "return forktrial.pack{ name = \"trivial\", version = \"0.1.0\", object_types = {}, "
             "relation_types = {}, tools = {}, settings_schema = \"\", capabilities = {} }\n");
  const std::string content = pack::content_hash(dir)->str();
  write_file(dir / "manifest.toml",
             "[pack]\nname = \"trivial\"\nversion = \"0.1.0\"\ndescription = \"d\"\nlicense = "
             "\"MIT\"\n[pack.provenance]\nauthored_by = \"human\"\n[pack.integrity]\ncontent_hash "
             "= \"" +
                 content +
                 "\"\n[dependencies]\nforktrial = \">=0.1,<1\"\n[surface]\n[runtime]\nlanguage = "
                 "\"lua\"\nentry = \"pack.lua\"\n");
  return sandbox::PackSource{dir.string(), *pack::bundle_hash(dir), true};
}

// Records run `run` of `events` chat messages in `store`.
inline void record_chat_run(store::EventStore& store, const store::RunId& run, int events) {
  (void)store.create_run(store::NewRun{.id = run, .label = "bench"});
  std::vector<store::NewEvent> batch;
  for (int i = 1; i <= events; ++i) {
    store::NewEvent e;
    e.id = store::numbered_event_id(static_cast<std::uint64_t>(i));
    e.type = "chat.message";
    e.payload = R"({"text":"hello"})";
    e.timestamp = "2026-01-05T10:00:00.000Z";
    batch.push_back(e);
  }
  (void)store.append(run, 0, batch);
}

// A new directory `prefix` + "-XXXXXX" in `parent`; nullopt (with the
// error printed) when it cannot be made.
inline std::optional<std::filesystem::path> make_bench_dir(const std::filesystem::path& parent,
                                                           const std::string& prefix) {
  std::string pattern = (parent / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return std::nullopt;
  }
  return std::filesystem::path(pattern);
}

// A store in `dir`, durable unless `sync` is false, holding run `run` of 20
// chat messages.
inline store::EventStore recorded_store(const std::filesystem::path& dir, bool sync,
                                        const store::RunId& run) {
  store::StoreOptions options;
  options.sync = sync;
  store::EventStore store(dir, options);
  record_chat_run(store, run, 20);
  return store;
}

}  // namespace forktrial::bench
