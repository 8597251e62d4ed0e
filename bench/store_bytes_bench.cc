// The store's bytes per trial for the demo's mix of candidates, run for real:
// `forktrial batch` (a coordinator and worker processes, trial children and
// all) over jobs of the soak's mix (scripts/soak-check: greeter and
// chat_echo completing, flaky_replies failing its scenario, runaway
// exceeding its limits, undeclared failing to materialize; forked at
// evt_009 and evt_031 of examples/runs/chat.jsonl). Prints
//
//  - the growth of the store's file per trial, and of its used pages (every
//    page below the file's end that is not on LMDB's free list);
//  - each table's pages and entries per trial (mdb_stat);
//  - the events table's key and value bytes per trial by kind of run (the
//    trials' forks, the orchestration log, the jobs' archives, the result
//    cache), and the forks' own events per trial by type;
//  - the orchestration log's payload bytes per trial by event type;
//  - the bytes per trial of a compacting copy of the store (what
//    `forktrial compact --output` writes).
//
// usage: store_bytes_bench [--trials N] [--job N] [--workers N] [--cache]
//                          [--dir DIR] [--forktrial PATH]
// The forktrial binary is --forktrial, else $FORKTRIAL_BINARY, else the
// build's own.
// --cache lets the coordinator answer repeats of the deterministic
// candidates from its result cache, as `forktrial submit` does; by default
// every trial runs (`--no-cache`). Exit status: 0 when measured, 1 when a
// trial did not end as the mix says it should, 2 on a usage or setup error.
#include <fcntl.h>
#include <lmdb.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/event_store.h"
#include "synthetic_peers.h"
#include "trivial_trial.h"

extern char** environ;

namespace {

using namespace forktrial;
namespace fs = std::filesystem;

struct Config {
  std::uint64_t trials = 3'000;
  std::uint64_t job = 600;  // the soak's jobs: 20,000 trials over some 33 kill cycles
  unsigned workers = 2;
  bool cache = false;
  fs::path dir = fs::temp_directory_path();
  std::string forktrial = FORKTRIAL_BINARY;
};

// The soak's mix (scripts/soak-check KINDS and FORK_POINTS): trial i is kind
// i mod 5, forked at the point (i / 5) mod 2.
struct Kind {
  const char* pack;
  const char* scenario;
  int max_events;
  const char* outcome;
};
constexpr std::array<Kind, 5> kKinds{{
    {"packs/greeter", "scenarios/smoke.lua", 2000, "completed"},
    {"packs/chat_echo", "scenarios/replay.lua", 2000, "completed"},
    {"candidates/flaky_replies", "scenarios/check.lua", 2000, "scenario_failed"},
    {"candidates/runaway", "scenarios/start.lua", 200, "limits_exceeded"},
    {"candidates/undeclared", "scenarios/main.lua", 2000, "materialization_failed"},
}};
constexpr std::array<const char*, 2> kForkPoints{"evt_009", "evt_031"};
constexpr const char* kParent = "run_chat";

std::uint64_t file_bytes(const fs::path& store) {
  std::error_code error;
  const auto size = fs::file_size(store / "data.mdb", error);
  return error ? 0 : size;
}

// Runs argv to its end, its standard output into `out` (or /dev/null);
// returns its exit status.
int run(const std::vector<std::string>& argv, const fs::path& out = "/dev/null") {
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error(argv[0] + ": " + std::strerror(spawned));
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A table's pages and entries, as mdb_stat counts them.
struct TableStat {
  std::uint64_t pages = 0;
  std::uint64_t entries = 0;
};

// What LMDB says about the store's pages, read with the store closed.
struct PageStat {
  std::uint64_t page_size = 4096;
  std::uint64_t last_page = 0;   // pages in use or free below the file's end
  std::uint64_t free_pages = 0;  // on the free list
  std::map<std::string, TableStat> tables;

  std::uint64_t used_bytes() const { return (last_page + 1 - free_pages) * page_size; }
};

constexpr std::array<const char*, 7> kTables{"meta",      "runs",  "run_numbers", "events",
                                             "event_ids", "blobs", "blob_times"};

PageStat page_stat(const fs::path& store) {
  PageStat result;
  MDB_env* env = nullptr;
  if (mdb_env_create(&env) != 0) throw std::runtime_error("mdb_env_create failed");
  mdb_env_set_maxdbs(env, 16);
  if (mdb_env_open(env, store.c_str(), MDB_RDONLY, 0600) != 0) {
    mdb_env_close(env);
    throw std::runtime_error("cannot open the store " + store.string());
  }
  MDB_envinfo info{};
  mdb_env_info(env, &info);
  result.last_page = info.me_last_pgno;
  MDB_txn* txn = nullptr;
  mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  // The free list is database 0, as mdb_stat -f reads it: each record a
  // list of page numbers, its count first.
  MDB_cursor* cursor = nullptr;
  if (mdb_cursor_open(txn, 0, &cursor) == 0) {
    MDB_val key;
    MDB_val value;
    while (mdb_cursor_get(cursor, &key, &value, MDB_NEXT) == 0) {
      std::size_t count = 0;
      std::memcpy(&count, value.mv_data, sizeof count);
      result.free_pages += count;
    }
    mdb_cursor_close(cursor);
  }
  MDB_stat stat{};
  MDB_dbi main_dbi = 0;
  if (mdb_dbi_open(txn, nullptr, 0, &main_dbi) == 0 && mdb_stat(txn, main_dbi, &stat) == 0) {
    result.page_size = stat.ms_psize;
    result.tables["(main)"] = {stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages,
                               stat.ms_entries};
  }
  for (const char* name : kTables) {
    MDB_dbi dbi = 0;
    if (mdb_dbi_open(txn, name, 0, &dbi) != 0 || mdb_stat(txn, dbi, &stat) != 0) continue;
    result.tables[name] = {stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages,
                           stat.ms_entries};
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return result;
}

// Which part of forktrial a run belongs to, by its id.
std::string kind_of(const store::RunInfo& run) {
  const std::string& id = run.id.str();
  if (id == "forktrial.orchestration") return "log";
  if (id.starts_with("forktrial.archive.")) return "archives";
  if (id.starts_with("forktrial.cache.")) return "cache";
  if (run.fork_of && run.fork_of->parent.str() == kParent) return "forks";
  return "other";
}

std::uint64_t big_endian(const void* bytes) {
  std::uint64_t value = 0;
  const auto* b = static_cast<const unsigned char*>(bytes);
  for (int i = 0; i < 8; ++i) value = value << 8 | b[i];
  return value;
}

struct Bytes {
  std::uint64_t count = 0;
  std::uint64_t keys = 0;
  std::uint64_t values = 0;
};

// The events table's and event_ids' entries, key and value bytes, by kind of
// run; raw LMDB, with the store closed.
std::map<std::string, std::pair<Bytes, Bytes>> entry_bytes(
    const fs::path& store, const std::map<std::uint64_t, std::string>& kinds) {
  std::map<std::string, std::pair<Bytes, Bytes>> result;
  MDB_env* env = nullptr;
  mdb_env_create(&env);
  mdb_env_set_maxdbs(env, 16);
  if (mdb_env_open(env, store.c_str(), MDB_RDONLY, 0600) != 0) {
    mdb_env_close(env);
    throw std::runtime_error("cannot open the store " + store.string());
  }
  MDB_txn* txn = nullptr;
  mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  for (const bool ids : {false, true}) {
    MDB_dbi dbi = 0;
    if (mdb_dbi_open(txn, ids ? "event_ids" : "events", 0, &dbi) != 0) continue;
    MDB_cursor* cursor = nullptr;
    mdb_cursor_open(txn, dbi, &cursor);
    MDB_val key;
    MDB_val value;
    while (mdb_cursor_get(cursor, &key, &value, MDB_NEXT) == 0) {
      if (key.mv_size < 8) continue;
      const auto found = kinds.find(big_endian(key.mv_data));
      auto& entry = result[found == kinds.end() ? "other" : found->second];
      Bytes& bytes = ids ? entry.second : entry.first;
      ++bytes.count;
      bytes.keys += key.mv_size;
      bytes.values += value.mv_size;
    }
    mdb_cursor_close(cursor);
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return result;
}

class Bench {
 public:
  explicit Bench(Config config) : config_(std::move(config)) {
    auto dir = bench::make_bench_dir(config_.dir, "forktrial-store-bytes");
    if (!dir) throw std::runtime_error("cannot make a directory in " + config_.dir.string());
    root_ = *dir;
    store_ = root_ / "store";
  }
  ~Bench() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  int run() {
    const fs::path examples = fs::path(FORKTRIAL_SOURCE_DIR) / "examples";
    if (::run({config_.forktrial, "run", "import", (examples / "runs/chat.jsonl").string(),
               "--store", store_.string(), "--id", kParent, "--label", "recorded chat"}) != 0) {
      throw std::runtime_error("cannot import examples/runs/chat.jsonl");
    }
    const std::uint64_t seeded = file_bytes(store_);
    const PageStat before = page_stat(store_);

    std::map<std::string, std::uint64_t> wrong;  // "label: outcome" of trials off the mix
    const auto started = std::chrono::steady_clock::now();
    for (std::uint64_t done = 0; done < config_.trials;) {
      const std::uint64_t size = std::min(config_.job, config_.trials - done);
      run_job(examples, done, size, wrong);
      done += size;
      std::fprintf(stderr, "store_bytes: %llu of %llu trials\r",
                   static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(config_.trials));
    }
    std::fprintf(stderr, "\n");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    const PageStat after = page_stat(store_);
    const double n = static_cast<double>(config_.trials);
    std::printf(
        "trials                 %llu of the soak's mix in jobs of %llu, forktrial batch "
        "--workers %u%s, %.1f s\n",
        static_cast<unsigned long long>(config_.trials),
        static_cast<unsigned long long>(config_.job), config_.workers,
        config_.cache ? "" : " --no-cache", seconds);
    const std::uint64_t grown = file_bytes(store_) - seeded;
    std::printf("store file per trial   %.0f bytes (%.2f KiB; the file grew %.1f MiB)\n",
                static_cast<double>(grown) / n, static_cast<double>(grown) / n / 1024,
                static_cast<double>(grown) / (1 << 20));
    const double used = static_cast<double>(after.used_bytes() - before.used_bytes());
    std::printf("used pages per trial   %.0f bytes (%.2f KiB; %llu pages free in the file)\n",
                used / n, used / n / 1024, static_cast<unsigned long long>(after.free_pages));
    std::printf("tables, pages' bytes and entries per trial:");
    for (const auto& [name, stat] : after.tables) {
      const auto was = before.tables.contains(name) ? before.tables.at(name) : TableStat{};
      std::printf(" %s %.0f (%.2f)", name.c_str(),
                  static_cast<double>((stat.pages - was.pages) * after.page_size) / n,
                  static_cast<double>(stat.entries - was.entries) / n);
    }
    std::printf("\n");

    print_runs();
    // A compacting copy, as `forktrial compact --output` writes it.
    {
      store::EventStore store(store_);
      store.copy_compacted(root_ / "compacted");
    }
    const std::uint64_t compacted = file_bytes(root_ / "compacted");
    std::printf("compacted copy         %.0f bytes per trial (%.1f MiB in all)\n",
                static_cast<double>(compacted - seeded) / n,
                static_cast<double>(compacted) / (1 << 20));
    if (!wrong.empty()) {
      std::printf("trials off the mix:");
      for (const auto& [what, count] : wrong) {
        std::printf(" %s x%llu", what.c_str(), static_cast<unsigned long long>(count));
      }
      std::printf("\n");
      return 1;
    }
    return 0;
  }

 private:
  // Writes and runs one job of `size` trials of the mix, from trial `first`.
  void run_job(const fs::path& examples, std::uint64_t first, std::uint64_t size,
               std::map<std::string, std::uint64_t>& wrong) {
    const fs::path file = root_ / "job.jsonl";
    {
      std::ofstream out(file);
      for (std::uint64_t i = first; i < first + size; ++i) {
        const Kind& kind = kKinds[i % kKinds.size()];
        const char* at = kForkPoints[(i / kKinds.size()) % kForkPoints.size()];
        out << R"({"schema_version":1,"parent_run_id":")" << kParent << R"(","at_event":")" << at
            << R"(","label":")" << fs::path(kind.pack).filename().string()
            << R"(","candidate":{"root_dir":")" << (examples / kind.pack).string()
            << R"("},"extra_packs":[],"scenario":")" << kind.scenario
            << R"(","limits":{"wall_clock_seconds":20,"max_events":)" << kind.max_events << "}}\n";
      }
    }
    std::vector<std::string> argv{config_.forktrial,
                                  "batch",
                                  file.string(),
                                  "--store",
                                  store_.string(),
                                  "--workers",
                                  std::to_string(config_.workers),
                                  "--json"};
    if (!config_.cache) argv.push_back("--no-cache");
    const fs::path results = root_ / "results.jsonl";
    const int status = ::run(argv, results);
    if (status != 0 && status != 1) {
      throw std::runtime_error("forktrial batch exited " + std::to_string(status));
    }
    // Each result line names its label and outcome; the mix says which.
    std::ifstream in(results);
    std::string line;
    std::uint64_t lines = 0;
    while (std::getline(in, line)) {
      const auto label = field(line, "candidate");
      const auto outcome = field(line, "outcome");
      if (label.empty()) continue;  // the summary
      ++lines;
      const auto kind = std::ranges::find_if(
          kKinds, [&](const Kind& k) { return fs::path(k.pack).filename().string() == label; });
      if (kind == kKinds.end() || outcome != kind->outcome) ++wrong[label + ": " + outcome];
    }
    if (lines != size) ++wrong["missing results"];
  }

  // The text of "name":"..." in a JSON line; empty when absent.
  static std::string field(const std::string& line, const std::string& name) {
    const std::string start = "\"" + name + "\":\"";
    const auto at = line.find(start);
    if (at == std::string::npos) return {};
    const auto from = at + start.size();
    return line.substr(from, line.find('"', from) - from);
  }

  // The events by kind of run, and the forks' own and the log's events by type.
  void print_runs() const {
    const double n = static_cast<double>(config_.trials);
    std::map<std::uint64_t, std::string> kinds;
    std::map<std::string, std::uint64_t> runs;
    std::map<std::string, Bytes> fork_types;
    std::map<std::string, Bytes> log_types;
    {
      store::EventStore store(store_);
      auto snapshot = store.snapshot();
      for (const store::RunInfo& run : snapshot.runs()) {
        const std::string kind = kind_of(run);
        kinds[run.number] = kind;
        ++runs[kind];
        auto* types = kind == "forks" ? &fork_types : kind == "log" ? &log_types : nullptr;
        if (types == nullptr) continue;
        const std::uint64_t from = run.fork_of ? run.fork_of->seq + 1 : 1;
        snapshot.for_each_event(run, from, [&](const store::EventView& event) {
          Bytes& bytes = (*types)[std::string(event.type)];
          ++bytes.count;
          bytes.values += event.payload.size();
          // The texts beside the payload: id, timestamp, actor, frame, cause.
          bytes.keys += event.id.size() + event.type.size() + event.timestamp.size() +
                        event.actor.value_or("").size() + event.frame_id.value_or("").size() +
                        event.caused_by.value_or("").size();
          return true;
        });
      }
    }
    std::printf("runs per trial        ");
    for (const auto& [kind, count] : runs) {
      std::printf(" %s %.3f", kind.c_str(), static_cast<double>(count) / n);
    }
    std::printf("\n");
    for (const auto& [kind, entries] : entry_bytes(store_, kinds)) {
      const auto& [events, ids] = entries;
      std::printf(
          "  %-9s events %.1f a trial: %.0f key + %.0f value bytes; event_ids %.0f key + %.0f "
          "value bytes\n",
          kind.c_str(), static_cast<double>(events.count) / n, static_cast<double>(events.keys) / n,
          static_cast<double>(events.values) / n, static_cast<double>(ids.keys) / n,
          static_cast<double>(ids.values) / n);
    }
    const auto print_types = [&](const char* title, const std::map<std::string, Bytes>& types) {
      std::printf("%s\n", title);
      std::vector<std::pair<std::string, Bytes>> sorted(types.begin(), types.end());
      std::ranges::sort(sorted, [](const auto& a, const auto& b) {
        return a.second.values + a.second.keys > b.second.values + b.second.keys;
      });
      for (const auto& [type, bytes] : sorted) {
        std::printf("  %-28s %7.2f events, %6.0f payload + %5.0f other text bytes a trial\n",
                    type.c_str(), static_cast<double>(bytes.count) / n,
                    static_cast<double>(bytes.values) / n, static_cast<double>(bytes.keys) / n);
      }
    };
    print_types("the forks' own events by type:", fork_types);
    print_types("the orchestration log's events by type:", log_types);
  }

  Config config_;
  fs::path root_;
  fs::path store_;
};

}  // namespace

int main(int argc, char** argv) {
  Config config;
  // scripts/bench names the Release build's binary.
  if (const char* binary = std::getenv("FORKTRIAL_BINARY"); binary && *binary) {
    config.forktrial = binary;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (bench::number_option(argc, argv, i, "--trials", 1, UINT64_MAX, config.trials) ||
        bench::number_option(argc, argv, i, "--job", 1, 1'000'000, config.job) ||
        bench::number_option(argc, argv, i, "--workers", 1, 64, config.workers)) {
      continue;
    }
    if (arg == "--cache") {
      config.cache = true;
    } else if (arg == "--dir" && has_value) {
      config.dir = argv[++i];
    } else if (arg == "--forktrial" && has_value) {
      config.forktrial = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: store_bytes_bench [--trials N] [--job N] [--workers N] [--cache] "
                   "[--dir DIR] [--forktrial PATH]\n");
      return 2;
    }
  }
  try {
    Bench bench(config);
    return bench.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bytes_bench: %s\n", e.what());
    return 2;
  }
}
