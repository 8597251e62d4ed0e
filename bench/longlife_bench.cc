// A coordinator's long life, measured: N trivial trials run through the
// coordinator's real message handling and recording (CoordinatorCore, the
// daemon's loop without its socket), then a restart, a gc and a compaction
// of the store. Prints
//
//  - the store's bytes per trial (its file's growth over the trials), and
//    where they go: each table's pages, and the orchestration log's event
//    bytes by type;
//  - the restart's time (the log replayed into the scheduler, results
//    indexed), against the time to read the same log without applying it,
//    measured in the same run;
//  - the compaction of the log (replaced by a snapshot of the live state),
//    and the restart's time after it, with the events it reads;
//  - the store's file before and after `gc --keep none` and after a
//    compacting copy.
//
// A trivial trial's worker report carries --events events of a few bytes
// (default 1). Trials are submitted in jobs of --job trials and leased to
// one synthetic worker; time is the core's virtual time.
//
// usage: longlife_bench [--trials N] [--job N] [--events N] [--dir DIR]
// Exit status: 0 when measured (the figures are for the README), 2 on a
// usage or setup error.
#include <capnp/message.h>
#include <lmdb.h>
#include <malloc.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "coordinator/orchestration_log.h"
#include "coordinator/retention.h"
#include "coordinator/server.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "synthetic_peers.h"

namespace {

using namespace forktrial;
using namespace forktrial::coordinator;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Replies = std::vector<std::pair<std::string, std::string>>;

struct Config {
  std::uint64_t trials = 100'000;
  std::uint32_t job = 1'000;
  std::uint32_t events = 1;
  fs::path dir = fs::temp_directory_path();
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::uint64_t file_bytes(const fs::path& store) {
  std::error_code error;
  const auto size = fs::file_size(store / "data.mdb", error);
  return error ? 0 : size;
}

// A frame's decoded envelope; throws when the core answered an error.
wire::Frame answer(const Replies& replies, std::size_t at = 0) {
  if (replies.size() <= at) throw std::runtime_error("the core did not answer");
  auto frame = wire::decode(replies[at].second);
  if (!frame) throw std::runtime_error("the core's answer does not decode");
  if (frame->envelope().isError()) {
    throw std::runtime_error("the core refused: " +
                             wire::text(frame->envelope().getError().getMessage()));
  }
  return std::move(*frame);
}

// The bytes this process's heap holds in use.
std::uint64_t heap_in_use() {
  return mallinfo2().uordblks;
}

class Bench {
 public:
  explicit Bench(const Config& config) : config_(config) {
    std::string pattern = (config.dir / "forktrial-longlife-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
    server_.store = root_ / "store";
    // The whole history is kept while the trials run, for the restart that
    // replays it; the log is compacted after (run).
    server_.compact_log_after = 0;
  }
  ~Bench() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  void run() {
    seed_store();
    const std::uint64_t seeded = file_bytes(server_.store);
    const auto ran = Clock::now();
    run_trials();
    const double trial_seconds = seconds_since(ran);
    const std::uint64_t grown = file_bytes(server_.store) - seeded;
    std::printf("trials                 %llu in jobs of %u, %u event(s) each, %.1f s (%.0f/s)\n",
                static_cast<unsigned long long>(config_.trials), config_.job, config_.events,
                trial_seconds, static_cast<double>(config_.trials) / trial_seconds);
    std::printf("store per trial        %.0f bytes (the file grew %.1f MiB)\n",
                static_cast<double>(grown) / static_cast<double>(config_.trials),
                static_cast<double>(grown) / (1 << 20));
    print_tables();
    print_log_types();

    // Restart: a new core on the store replays the log.
    const std::uint64_t heap_before = heap_in_use();
    std::uint64_t heap_restarted = 0;
    const auto restart = Clock::now();
    {
      CoordinatorCore restarted(server_, quiet_);
      heap_restarted = heap_in_use() - std::min(heap_in_use(), heap_before);
    }
    const double restart_seconds = seconds_since(restart);
    std::printf(
        "coordinator heap       at most %.1f MiB between jobs while it ran, %.1f MiB after a "
        "restart (finished jobs are archived: it does not grow with the trials run)\n",
        static_cast<double>(heap_grown_) / (1 << 20),
        static_cast<double>(heap_restarted) / (1 << 20));
    const auto read = Clock::now();
    std::uint64_t records = 0;
    {
      store::EventStore store(server_.store);
      auto snapshot = store.snapshot();
      auto log = read_log(
          snapshot, [&](OrchestrationRecord&&) { ++records; }, [](const store::EventView&) {});
      if (!log) throw std::runtime_error("the log does not read: " + log.error().message);
    }
    const double read_seconds = seconds_since(read);
    std::printf("restart                %.2f s; reading its %llu records alone %.2f s: %.2fx\n",
                restart_seconds, static_cast<unsigned long long>(records), read_seconds,
                restart_seconds / read_seconds);

    // The log replaced by a snapshot: a coordinator that compacts at the end
    // of its first turn, then a restart from the snapshot.
    ServerConfig compacting = server_;
    compacting.compact_log_after = 1;
    const auto compact = Clock::now();
    {
      CoordinatorCore core(compacting, quiet_, 1, now_);
      answer(core.turn("c", client_hello(), now_));
    }
    const double compact_seconds = seconds_since(compact);
    const auto again = Clock::now();
    { CoordinatorCore restarted(server_, quiet_); }
    const double again_seconds = seconds_since(again);
    std::uint64_t events = 0;
    records = 0;
    {
      store::EventStore store(server_.store);
      auto snapshot = store.snapshot();
      auto log = read_log(
          snapshot,
          [&](OrchestrationRecord&&) {
            ++records;
            ++events;
          },
          [&](const store::EventView&) { ++events; });
      if (!log) throw std::runtime_error("the log does not read: " + log.error().message);
    }
    std::printf(
        "compacted log          restart and compaction %.2f s; then a restart %.3f s, reading "
        "%llu records (%llu events: the live state)\n",
        compact_seconds, again_seconds, static_cast<unsigned long long>(records),
        static_cast<unsigned long long>(events));

    // gc --keep none, then a compacting copy.
    const std::uint64_t before_gc = file_bytes(server_.store);
    store::DeletedRuns deleted;
    std::uint64_t compacted = 0;
    {
      store::EventStore store(server_.store);
      const auto now = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
      auto plan = plan_gc(store.snapshot(), RetentionPolicy{KeepForks::none, Duration(0)}, now);
      if (!plan) throw std::runtime_error("gc cannot plan: " + plan.error().message);
      const auto collected = Clock::now();
      deleted = apply_gc(store, plan->forks, 1000, {}).deleted;
      std::printf("gc --keep none         %llu forks, %llu events, %.1f MiB freed in %.2f s\n",
                  static_cast<unsigned long long>(deleted.runs),
                  static_cast<unsigned long long>(deleted.events),
                  static_cast<double>(deleted.bytes) / (1 << 20), seconds_since(collected));
      store.copy_compacted(root_ / "compacted");
      compacted = file_bytes(root_ / "compacted");
    }
    std::printf(
        "store file             %.1f MiB before gc, %.1f MiB after (LMDB keeps its "
        "file), %.1f MiB compacted: %.0f bytes per trial kept\n",
        static_cast<double>(before_gc) / (1 << 20),
        static_cast<double>(file_bytes(server_.store)) / (1 << 20),
        static_cast<double>(compacted) / (1 << 20),
        static_cast<double>(compacted - seeded) / static_cast<double>(config_.trials));
  }

 private:
  void seed_store() { trial_ = bench::seed_trivial_store(server_.store); }

  void run_trials() {
    const std::uint64_t heap_before = heap_in_use();
    CoordinatorCore core(server_, quiet_, 1, now_);
    answer(core.turn("c", client_hello(), now_));
    answer(core.turn("w", worker_hello(), now_));
    std::uint64_t done = 0;
    while (done < config_.trials) {
      const auto size =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(config_.job, config_.trials - done));
      tick();
      answer(core.turn("c", submission(size), now_));
      std::uint32_t left = size;
      while (left > 0) {
        tick();
        auto work = answer(core.turn("w", request_work(left), now_));
        const auto assignments = work.envelope().getAssignments().getAssignments();
        if (assignments.size() == 0) throw std::runtime_error("no work leased");
        std::vector<CoordinatorCore::Frame> reports;
        for (auto assignment : assignments) reports.push_back({"w", report(assignment.getTrial())});
        for (std::size_t from = 0; from < reports.size(); from += 256) {
          tick();
          const std::size_t to = std::min(reports.size(), from + 256);
          const auto acks = core.turn(std::span(reports).subspan(from, to - from), now_);
          for (std::size_t i = 0; i < acks.size(); ++i) answer(acks, i);
        }
        left -= assignments.size();
      }
      done += size;
      heap_grown_ = std::max(heap_grown_, heap_in_use() - std::min(heap_in_use(), heap_before));
      if (done % 10'000 < size) {
        std::fprintf(stderr, "longlife: %llu of %llu trials\r",
                     static_cast<unsigned long long>(done),
                     static_cast<unsigned long long>(config_.trials));
      }
    }
    std::fprintf(stderr, "\n");
  }

  void tick() { now_ += std::chrono::milliseconds(1); }

  std::string client_hello() { return bench::client_hello_frame(++request_); }
  std::string worker_hello() { return bench::worker_hello_frame(++request_, "w1", 1024); }
  std::string submission(std::uint32_t trials) {
    return bench::submission_frame(++request_, "longlife", trials, trial_);
  }
  std::string request_work(std::uint32_t slots) {
    return bench::request_work_frame(++request_, std::min(slots, 1024u));
  }
  std::string report(schema::wire::TrialRef::Reader trial) {
    return bench::report_frame(++request_, trial, config_.events);
  }

  // The pages of each table (mdb_stat), read with the store closed.
  void print_tables() const {
    MDB_env* env = nullptr;
    if (mdb_env_create(&env) != 0) return;
    mdb_env_set_maxdbs(env, 16);
    if (mdb_env_open(env, server_.store.c_str(), MDB_RDONLY, 0600) != 0) {
      mdb_env_close(env);
      return;
    }
    MDB_txn* txn = nullptr;
    mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
    std::printf("tables (bytes per trial of their pages):");
    for (const char* name : {"runs", "run_numbers", "events", "event_ids", "blobs"}) {
      MDB_dbi dbi = 0;
      MDB_stat stat{};
      if (mdb_dbi_open(txn, name, 0, &dbi) != 0 || mdb_stat(txn, dbi, &stat) != 0) continue;
      const double bytes =
          static_cast<double>(stat.ms_psize) *
          static_cast<double>(stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages);
      std::printf(" %s %.0f", name, bytes / static_cast<double>(config_.trials));
    }
    std::printf("\n");
    mdb_txn_abort(txn);
    mdb_env_close(env);
  }

  // The orchestration log's payload bytes per trial, by event type.
  void print_log_types() const {
    store::EventStore store(server_.store);
    auto snapshot = store.snapshot();
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> types;  // count, bytes
    if (auto log = snapshot.run(kOrchestrationRun)) {
      snapshot.for_each_event(*log, 1, [&](const store::EventView& event) {
        auto& [count, bytes] = types[std::string(event.type)];
        ++count;
        bytes += event.payload.size();
        return true;
      });
    }
    std::printf("log payload bytes per trial:");
    for (const auto& [type, counted] : types) {
      std::printf(" %s %.0f (%llu events)", type.c_str(),
                  static_cast<double>(counted.second) / static_cast<double>(config_.trials),
                  static_cast<unsigned long long>(counted.first));
    }
    std::printf("\n");
    // The finished jobs' archives, which hold what the scheduler forgot.
    std::uint64_t archives = 0;
    std::uint64_t archived = 0;
    std::uint64_t bytes = 0;
    std::uint64_t own_inputs = 0;
    for (const store::RunInfo& run : snapshot.runs()) {
      if (!run.id.str().starts_with("forktrial.archive.")) continue;
      ++archives;
      snapshot.for_each_event(run, 1, [&](const store::EventView& event) {
        ++archived;
        bytes += event.payload.size();
        if (event.payload.find("\"input\":") != std::string_view::npos) ++own_inputs;
        return true;
      });
    }
    std::printf(
        "archives               %llu jobs, %llu trials, %.0f payload bytes per trial (%llu "
        "holding their input, the others a repeat's)\n",
        static_cast<unsigned long long>(archives), static_cast<unsigned long long>(archived),
        archived == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(archived),
        static_cast<unsigned long long>(own_inputs));
  }

  Config config_;
  std::uint64_t heap_grown_ = 0;  // the most the coordinator's heap grew by, between jobs
  // The core keeps a reference to its log.
  const Log quiet_ = [](LogLevel, const std::string&) {};
  fs::path root_;
  ServerConfig server_;
  std::string trial_;
  Instant now_{std::chrono::milliseconds(1'700'000'000'000)};
  std::uint64_t request_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (bench::number_option(argc, argv, i, "--trials", 1, UINT64_MAX, config.trials) ||
        bench::number_option(argc, argv, i, "--job", 1, 1'000'000, config.job) ||
        bench::number_option(argc, argv, i, "--events", 0, 1000, config.events)) {
      continue;
    }
    if (arg == "--dir" && has_value) {
      config.dir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: longlife_bench [--trials N] [--job N] [--events 0..1000] [--dir DIR]\n");
      return 2;
    }
  }
  try {
    Bench bench(config);
    bench.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "longlife_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
