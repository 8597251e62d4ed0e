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
#include <string>
#include <vector>

#include "sandbox/spawn.h"
#include "sandbox/trial.h"
#include "store/event_store.h"
#include "trivial_trial.h"

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
  const auto made = bench::make_bench_dir(parent, "forktrial-trial-bench");
  if (!made) return 2;
  const std::filesystem::path dir = *made;

  int status = 0;
  {
    const store::RunId run("run_bench");
    store::EventStore store = bench::recorded_store(dir / "store", sync, run);

    sandbox::TrialSpecification spec;
    spec.parent_run_id = run;
    spec.at_event = store::numbered_event_id(20);
    spec.candidate = bench::write_trivial_pack(dir / "pack");
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
