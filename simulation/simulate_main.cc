// forktrial-simulate: runs the cluster simulation (simulation/simulator.h)
// for one seed or many, and prints what each run did, how fast it ran in
// real time and how much memory the coordinator's code held.
//
// The coordinator's memory is counted here, exactly: this program replaces
// operator new and delete, and every allocation made while the simulation is
// in the coordinator's code (Config::coordinator_scope) is charged to the
// coordinator until it is freed, wherever that happens. Its peak is the
// figure printed. The simulated workers and network are charged apart; the
// store is the coordinator's disk (a memory map), not its heap.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "simulation/simulator.h"

namespace {

// ---- allocation accounting

constexpr std::size_t kHeader = 16;  // keeps the alignment malloc gives

thread_local int account = 0;  // 1 while in the coordinator's code
std::atomic<std::int64_t> live[2];
std::atomic<std::int64_t> peak[2];

void* allocate(std::size_t size) {
  auto* base = static_cast<unsigned char*>(std::malloc(size + kHeader));
  if (base == nullptr) throw std::bad_alloc();
  const int who = account;
  auto* header = reinterpret_cast<std::uint64_t*>(base);
  header[0] = size;
  header[1] = static_cast<std::uint64_t>(who);
  const std::int64_t now =
      live[who].fetch_add(static_cast<std::int64_t>(size)) + static_cast<std::int64_t>(size);
  std::int64_t seen = peak[who].load();
  while (now > seen && !peak[who].compare_exchange_weak(seen, now)) {
  }
  return base + kHeader;
}

void release(void* pointer) noexcept {
  if (pointer == nullptr) return;
  auto* base = static_cast<unsigned char*>(pointer) - kHeader;
  const auto* header = reinterpret_cast<const std::uint64_t*>(base);
  live[header[1]].fetch_sub(static_cast<std::int64_t>(header[0]));
  std::free(base);
}

}  // namespace

void* operator new(std::size_t size) {
  return allocate(size);
}
void* operator new[](std::size_t size) {
  return allocate(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* pointer) noexcept {
  release(pointer);
}
void operator delete[](void* pointer) noexcept {
  release(pointer);
}
void operator delete(void* pointer, std::size_t) noexcept {
  release(pointer);
}
void operator delete[](void* pointer, std::size_t) noexcept {
  release(pointer);
}
void operator delete(void* pointer, const std::nothrow_t&) noexcept {
  release(pointer);
}
void operator delete[](void* pointer, const std::nothrow_t&) noexcept {
  release(pointer);
}

namespace {

using forktrial::simulation::Config;
using forktrial::simulation::Duration;
using forktrial::simulation::Report;
using nlohmann::ordered_json;

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

long peak_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Runs the forktrial cluster in virtual time: the shipped coordinator core, on a real\n"
      "store, fed real wire frames by simulated workers, a simulated client and a simulated\n"
      "network, with message loss, duplication and reordering, worker crashes and stalls,\n"
      "coordinator crashes with log replay, a full disk, and deltas the store refuses. Every\n"
      "step is checked against the cluster's promises (each trial ends exactly once, nothing\n"
      "acknowledged is lost, no job starves, leases never overlap). One seed gives one run: a\n"
      "failing seed replays the same run.",
      "forktrial-simulate"};
  Config config;
  std::uint64_t seeds = 1;
  std::string faults = "every";
  double chaos_seconds = -1;
  std::uint32_t loss = 0, duplication = 0, max_delay = 0, coordinator_crashes = 0, store_full = 0,
                worker_crashes = 0, worker_stalls = 0;
  std::string store_dir;
  bool json = false;
  bool progress = false;
  bool no_compare = false;
  double progress_every = 10;
  app.add_option("--seed", config.seed, "the first seed")->default_val(1);
  app.add_option("--seeds", seeds, "how many seeds to run, from --seed on")->default_val(1);
  app.add_option("--workers", config.workers, "simulated workers")
      ->default_val(20)
      ->check(CLI::Range(1u, 1'000'000u));
  app.add_option("--max-slots", config.max_slots, "each worker has 1..N slots")
      ->default_val(4)
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--trials", config.trials, "trials over all jobs")
      ->default_val(1000)
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{100'000'000}));
  app.add_option("--jobs", config.jobs, "jobs (the third is cancelled soon after it arrives)")
      ->default_val(6)
      ->check(CLI::Range(1u, 10'000u));
  app.add_option("--faults", faults,
                 "every: all kinds at rates a short run meets; none: a quiet cluster; the "
                 "options below change single rates")
      ->check(CLI::IsMember({"every", "none"}))
      ->default_val("every");
  app.add_option("--chaos", chaos_seconds, "seconds of virtual time with faults")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--loss", loss, "messages lost, per thousand")->check(CLI::Range(0u, 1000u));
  app.add_option("--duplication", duplication, "messages duplicated, per thousand")
      ->check(CLI::Range(0u, 1000u));
  app.add_option("--max-delay", max_delay, "a message's delay is 1..N ms (reorders them)")
      ->check(CLI::Range(0u, 100'000u));
  app.add_option("--coordinator-crashes", coordinator_crashes, "coordinator crashes in the chaos")
      ->check(CLI::Range(0u, 100'000u));
  app.add_option("--store-full", store_full, "episodes of a full store in the chaos")
      ->check(CLI::Range(0u, 100'000u));
  app.add_option("--worker-crashes", worker_crashes, "per thousand workers per second of chaos")
      ->check(CLI::Range(0u, 1000u));
  app.add_option("--worker-stalls", worker_stalls, "per thousand workers per second of chaos")
      ->check(CLI::Range(0u, 1000u));
  app.add_flag("--no-compare-replay", no_compare,
               "skip comparing the whole replayed state at each restart (O(state) each)");
  app.add_option("--compact-log-after", config.compact_log_after,
                 "the coordinator compacts its log once this many events follow its last "
                 "snapshot (and --compact-log-ratio times the snapshot's); 0: never")
      ->capture_default_str();
  app.add_option("--compact-log-ratio", config.compact_log_ratio,
                 "... and this many times the last snapshot's events")
      ->capture_default_str();
  app.add_option("--store", store_dir,
                 "directory for the simulated coordinator's store (default: a new one under "
                 "$TMPDIR, removed at the end)");
  app.add_flag("--progress", progress, "print progress to stderr");
  app.add_option("--progress-every", progress_every,
                 "seconds of virtual time between progress lines, and between samples of the "
                 "coordinator's memory (the last is printed as its memory at the end)")
      ->default_val(10)
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "one JSON object per run on stdout");
  app.footer(
      "Examples:\n"
      "  forktrial-simulate --seeds 50\n"
      "  forktrial-simulate --seed 17 --workers 200 --trials 20000\n"
      "  forktrial-simulate --workers 10000 --trials 1000000 --progress\n"
      "Exit status: 0 every run kept every promise; 1 a run broke one (the seed and the\n"
      "command that replays it are printed); 2 bad arguments.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is no error; bad arguments are 2
  }

  const auto given = [&](const char* name) { return app.count(name) > 0; };
  if (faults == "every") config.faults = forktrial::simulation::every_fault();
  if (given("--chaos"))
    config.faults.chaos = Duration{static_cast<std::int64_t>(chaos_seconds * 1000)};
  if (given("--loss")) config.faults.loss = loss;
  if (given("--duplication")) config.faults.duplication = duplication;
  if (given("--max-delay"))
    config.faults.max_delay = Duration{std::max<std::uint32_t>(max_delay, 1)};
  if (given("--coordinator-crashes")) config.faults.coordinator_crashes = coordinator_crashes;
  if (given("--store-full")) config.faults.store_full = store_full;
  if (given("--worker-crashes")) config.faults.worker_crashes = worker_crashes;
  if (given("--worker-stalls")) config.faults.worker_stalls = worker_stalls;
  config.compare_replay = !no_compare;
  config.coordinator_scope = [](bool entering) { account = entering ? 1 : 0; };
  // The coordinator's memory in use at each sample, less what it held before
  // the run: the last sample is its memory at the end of the run, all trials
  // and workers known.
  std::int64_t before = 0;
  std::int64_t sampled = 0;
  config.progress_every = Duration{static_cast<std::int64_t>(progress_every * 1000)};
  config.progress = [&](std::uint64_t ended, Duration at) {
    sampled = live[1].load() - before;
    if (!progress) return;
    std::fprintf(
        stderr,
        "  seed %llu: %llu of %llu trials ended at %.0f s of virtual time; "
        "coordinator memory %s\n",
        static_cast<unsigned long long>(config.seed), static_cast<unsigned long long>(ended),
        static_cast<unsigned long long>(config.trials), at.count() / 1000.0, mib(sampled).c_str());
  };

  std::filesystem::path base;
  if (store_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/forktrial-simulate-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "forktrial-simulate: cannot make a directory for the store under " << pattern
                << ": " << std::strerror(errno) << "\n";
      return 1;
    }
    base = pattern;
  } else {
    base = store_dir;
  }

  int failures = 0;
  const std::uint64_t first = config.seed;
  for (std::uint64_t i = 0; i < seeds; ++i) {
    config.seed = first + i;
    config.store_dir = base / ("seed-" + std::to_string(config.seed));
    before = live[1].load();
    sampled = 0;
    peak[1].store(before);
    Report report;
    try {
      report = forktrial::simulation::simulate(config);
    } catch (const forktrial::Error& e) {
      std::cerr << "forktrial-simulate: " << e.what() << "\n";
      return 2;
    }
    const std::int64_t coordinator_peak = peak[1].load() - before;
    const double rate = report.wall_seconds > 0 ? report.reconciled / report.wall_seconds : 0;
    if (json) {
      ordered_json out = {
          {"seed", report.seed},
          {"workers", config.workers},
          {"trials", config.trials},
          {"ok", !report.violation},
          {"violation", report.violation ? ordered_json(*report.violation) : ordered_json()},
          {"virtual_seconds", report.virtual_time.count() / 1000.0},
          {"wall_seconds", report.wall_seconds},
          {"trials_per_second", rate},
          {"coordinator_end_bytes", sampled},
          {"coordinator_peak_bytes", coordinator_peak},
          {"process_peak_rss_bytes", peak_rss_kib() * 1024},
          {"reconciled", report.reconciled},
          {"abandoned", report.abandoned},
          {"cancelled", report.cancelled},
          {"requeued", report.requeued},
          {"fenced", report.fenced},
          {"duplicates", report.duplicates},
          {"refused", report.refused},
          {"deltas_refused", report.deltas_refused},
          {"workers_lost", report.workers_lost},
          {"worker_crashes", report.worker_crashes},
          {"worker_stalls", report.worker_stalls},
          {"coordinator_restarts", report.coordinator_restarts},
          {"store_full_episodes", report.store_full_episodes},
          {"busy_replies", report.busy_replies},
          {"messages", report.messages},
          {"lost", report.lost},
          {"duplicated", report.duplicated},
          {"events", report.events},
          {"records", report.records},
          {"commits", report.commits},
          {"log_generation", report.log_generation},
          {"trace", report.trace}};
      std::cout << out.dump() << std::endl;
    } else {
      std::cout << "seed " << report.seed << ": "
                << (report.violation ? "BROKEN: " + *report.violation : "every promise kept")
                << "\n  " << report.reconciled << " reconciled, " << report.abandoned
                << " abandoned, " << report.cancelled << " cancelled of " << config.trials
                << " trials on " << config.workers << " workers; "
                << report.virtual_time.count() / 1000.0 << " s of virtual time in "
                << report.wall_seconds << " s (" << static_cast<long long>(rate)
                << " trials/s of real time)\n  coordinator memory " << mib(sampled)
                << " at the last sample, peak " << mib(coordinator_peak) << ", process peak RSS "
                << mib(peak_rss_kib() * 1024) << "\n  " << report.messages << " messages ("
                << report.lost << " lost, " << report.duplicated << " duplicated), "
                << report.requeued << " requeued, " << report.fenced << " fenced, "
                << report.duplicates << " duplicate reports, " << report.deltas_refused
                << " deltas the store refused, " << report.refused << " reports refused, "
                << report.worker_crashes << " worker crashes, " << report.worker_stalls
                << " stalls, " << report.workers_lost << " workers lost, "
                << report.coordinator_restarts << " coordinator restarts, "
                << report.store_full_episodes << " store-full episodes (" << report.busy_replies
                << " busy replies), " << report.log_generation << " log snapshots; trace "
                << report.trace << std::endl;
    }
    if (report.violation) {
      ++failures;
      std::cerr << "forktrial-simulate: seed " << report.seed
                << " broke a promise; replay it with: forktrial-simulate --seed " << report.seed
                << " --seeds 1 (and the same other options)\n";
    }
  }
  if (store_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(base, ignored);
  }
  return failures == 0 ? 0 : 1;
}
