// Per-trial overhead of a trivial `completed` trial — fork, scratch store,
// spawn of forktrial-child, pin check, Lua load, scenario, re-read and
// reconcile — against spawning `/bin/true` and `python3 -c pass` on the same
// machine in the same run. Prints medians and ratios; the target is a median
// trial of at most 5 ms.
//
// The store commits durably (fsync) by default; --no-sync measures without,
// to separate the disk's flush latency from forktrial's own work.
//
// usage: trial_bench [--trials N] [--dir DIR] [--no-sync]
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pack/bundle_hash.h"
#include "sandbox/spawn.h"
#include "sandbox/trial.h"
#include "store/event_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace forktrial;

constexpr double kTargetMs = 5.0;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename Body>
std::vector<double> time_runs(int runs, Body&& body) {
  std::vector<double> ms;
  body();  // warm-up: page cache, dynamic loader
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return ms;
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

int main(int argc, char** argv) {
  // The child built with this tree; the bench does not sit beside it.
  ::setenv("FORKTRIAL_CHILD", FORKTRIAL_CHILD_FOR_BENCH, 0);
  int trials = 100;
  bool sync = true;
  std::filesystem::path parent = std::filesystem::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      trials = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--no-sync") == 0) {
      sync = false;
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      parent = argv[++i];
    } else {
      std::fprintf(stderr, "usage: trial_bench [--trials N] [--dir DIR] [--no-sync]\n");
      return 2;
    }
  }
  std::string pattern = (parent / "forktrial-trial-bench-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::filesystem::path dir = pattern;

  // A trivial pack and a small recorded run.
  const auto pack_dir = dir / "pack";
  write(pack_dir / "pack.lua",
        "return forktrial.pack{ name = \"trivial\", version = \"0.1.0\", object_types = {}, "
        "relation_types = {}, tools = {}, settings_schema = \"\", capabilities = {} }\n");
  const std::string content = pack::content_hash(pack_dir)->str();
  write(pack_dir / "manifest.toml",
        "[pack]\nname = \"trivial\"\nversion = \"0.1.0\"\ndescription = \"d\"\nlicense = \"MIT\"\n"
        "[pack.provenance]\nauthored_by = \"human\"\n[pack.integrity]\ncontent_hash = \"" +
            content +
            "\"\n[dependencies]\nforktrial = \"*\"\n[surface]\n[runtime]\nlanguage = \"lua\"\n"
            "entry = \"pack.lua\"\n");
  const std::string pin = pack::bundle_hash(pack_dir)->str();

  int status = 0;
  {
    store::StoreOptions store_options;
    store_options.sync = sync;
    store::EventStore store(dir / "store", store_options);
    const store::RunId run("run_bench");
    (void)store.create_run(store::NewRun{.id = run, .label = "bench"});
    std::vector<store::NewEvent> events;
    for (int i = 1; i <= 20; ++i) {
      store::NewEvent e;
      e.id = store::numbered_event_id(static_cast<std::uint64_t>(i));
      e.type = "chat.message";
      e.payload = R"({"text":"hello"})";
      e.timestamp = "2026-01-05T10:00:00.000Z";
      events.push_back(e);
    }
    (void)store.append(run, 0, events);

    sandbox::TrialSpecification spec;
    spec.parent_run_id = run;
    spec.at_event = store::numbered_event_id(20);
    spec.candidate = sandbox::PackSource{pack_dir.string(), Digest::parse(pin), true};
    bool all_completed = true;
    auto trial_ms = time_runs(trials, [&] {
      auto report = sandbox::run_trial(store, spec);
      all_completed = all_completed && report.outcome == Outcome::completed;
    });
    auto spawn = [](std::vector<std::string> command) {
      sandbox::SpawnRequest request;
      request.program = command[0];
      request.args.assign(command.begin() + 1, command.end());
      request.env = {"PATH=/usr/bin:/bin"};
      return [request] { sandbox::run_child(request); };
    };
    auto true_ms = time_runs(trials, spawn({"/bin/true"}));
    auto python_ms = time_runs(std::max(5, trials / 5), spawn({"/usr/bin/python3", "-c", "pass"}));

    const double t = median(trial_ms);
    const double bt = median(true_ms);
    const double py = median(python_ms);
    std::printf("trial overhead (%d trivial completed trials, median, store %s)\n", trials,
                sync ? "durable" : "without fsync");
    std::printf("  forktrial trial          %8.2f ms\n", t);
    std::printf("  spawn /bin/true          %8.2f ms   trial / true   = %6.1fx\n", bt, t / bt);
    std::printf("  spawn python3 -c pass    %8.2f ms   trial / python = %6.2fx\n", py, t / py);
    const bool met = all_completed && t <= kTargetMs;
    std::printf("  target: median <= %.1f ms, all completed: %s\n", kTargetMs,
                met ? "PASS" : "MISS target");
    if (!met) status = 1;
  }
  std::filesystem::remove_all(dir);
  return status;
}
