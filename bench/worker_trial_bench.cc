// CPU per trivial trial spent by the side that runs it, outside its child,
// against the CPU of a bare posix_spawn of /bin/true (and its wait), all
// measured in the same run:
//
//  - worker side: sandbox::execute_trial, what a worker's slot runs for a
//    trial — a scratch directory leased from the worker's pool, its store
//    seeded from the fork's segment, the child spawned and supervised, the
//    scratch store read back, the accepted delta collected;
//  - local parent: sandbox::run_trial, the same but with a scratch directory
//    made and removed for the trial (as `forktrial trial` runs one), plus the
//    fork point's check and the fork recorded in the store (durable unless
//    --no-sync);
//  - the child of either: forktrial-child, for comparison.
//
// CPU is user + system time from getrusage: RUSAGE_SELF for the side itself,
// RUSAGE_CHILDREN for its reaped children. The three are measured in rounds
// that take turns, so that a change in the shared machine's load falls on
// all of them alike. Prints the CPU per trial, minor page faults per trial,
// and the ratios to the bare spawn; the target is a worker side of at most
// 1.0× the bare spawn.
//
// usage: worker_trial_bench [--trials N] [--rounds N] [--dir DIR] [--no-sync]
// Exit status: 0 when the target is met, 1 when missed, 2 on a usage or
// setup error.
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sandbox/scratch.h"
#include "sandbox/trial.h"
#include "store/event_store.h"
#include "trivial_trial.h"

extern char** environ;

namespace {

using namespace forktrial;

constexpr double kTarget = 1.0;  // worker side / bare spawn

struct Cpu {
  double self_ms = 0;      // user + system of this process
  double children_ms = 0;  // user + system of its reaped children
  double self_faults = 0;  // minor page faults of this process
  Cpu& operator+=(const Cpu& other) {
    self_ms += other.self_ms;
    children_ms += other.children_ms;
    self_faults += other.self_faults;
    return *this;
  }
};

double ms(const timeval& t) {
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
}

Cpu now() {
  rusage self{};
  rusage children{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &children);
  return {ms(self.ru_utime) + ms(self.ru_stime), ms(children.ru_utime) + ms(children.ru_stime),
          static_cast<double>(self.ru_minflt)};
}

// The CPU of `runs` calls of `body`.
Cpu measure(int runs, const std::function<void()>& body) {
  const Cpu start = now();
  for (int i = 0; i < runs; ++i) body();
  const Cpu end = now();
  return {end.self_ms - start.self_ms, end.children_ms - start.children_ms,
          end.self_faults - start.self_faults};
}

// posix_spawn of /bin/true and its wait: the floor of a fresh process.
void bare_spawn() {
  static char program[] = "/bin/true";
  char* argv[] = {program, nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, program, nullptr, nullptr, argv, environ) != 0) {
    std::perror("posix_spawn(/bin/true)");
    std::exit(2);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

void print_row(const char* what, const Cpu& cpu, int trials, double baseline) {
  const double self = cpu.self_ms / trials;
  const double child = cpu.children_ms / trials;
  std::printf("  %-28s %7.3f ms  (%5.2fx)   child %7.3f ms  (%5.2fx)   %6.1f faults\n", what, self,
              self / baseline, child, child / baseline, cpu.self_faults / trials);
}

}  // namespace

int main(int argc, char** argv) {
  // The child built with this tree; the bench does not sit beside it.
  ::setenv("FORKTRIAL_CHILD", FORKTRIAL_CHILD_FOR_BENCH, 0);
  int trials = 400;
  int rounds = 20;
  bool sync = true;
  std::filesystem::path parent = std::filesystem::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      trials = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--no-sync") == 0) {
      sync = false;
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      parent = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: worker_trial_bench [--trials N] [--rounds N] [--dir DIR] [--no-sync]\n");
      return 2;
    }
  }
  rounds = std::min(rounds, trials);
  const int per_round = std::max(1, trials / rounds);
  trials = per_round * rounds;

  const auto made = bench::make_bench_dir(parent, "forktrial-worker-trial-bench");
  if (!made) return 2;
  const std::filesystem::path dir = *made;

  int status = 0;
  {
    const store::RunId run("run_bench");
    store::EventStore store = bench::recorded_store(dir / "store", sync, run);
    std::vector<std::byte> segment;
    {
      auto snapshot = store.snapshot();
      segment = snapshot.segment(*snapshot.run(run), 20);
    }

    sandbox::TrialSpecification spec;
    spec.parent_run_id = run;
    spec.at_event = store::numbered_event_id(20);
    spec.candidate = bench::write_trivial_pack(dir / "pack");
    // A local run_trial makes a scratch directory for its trial; a worker
    // leases one from its pool, as `forktrial worker` does.
    sandbox::ChildOptions options;
    options.scratch_parent = dir / "scratch";
    std::filesystem::create_directories(options.scratch_parent);
    sandbox::ScratchPool pool(options.scratch_parent);
    sandbox::ChildOptions worker_options = options;
    worker_options.scratch_pool = &pool;

    bool all_completed = true;
    // The first trial that did not complete is shown: its figures are not
    // those of a trivial trial.
    auto note = [&](Outcome outcome, const std::string& detail) {
      if (outcome == Outcome::completed || !all_completed) return;
      all_completed = false;
      std::fprintf(stderr, "a trial ended %s: %s\n", std::string(outcome_name(outcome)).c_str(),
                   detail.c_str());
    };
    int executed = 0;
    auto worker_trial = [&] {
      const auto result = sandbox::execute_trial(
          segment, spec, store::RunId("run_trial_" + std::to_string(++executed)), worker_options);
      note(result.verdict.outcome, result.verdict.detail);
    };
    auto local_trial = [&] {
      const auto report = sandbox::run_trial(store, spec, options);
      note(report.outcome, report.detail);
    };
    // Warm-up: page cache, the allocator's first growth, lazy binding.
    bare_spawn();
    worker_trial();
    local_trial();

    Cpu spawn_cpu, worker_cpu, local_cpu;
    for (int round = 0; round < rounds; ++round) {
      spawn_cpu += measure(per_round, bare_spawn);
      worker_cpu += measure(per_round, worker_trial);
      local_cpu += measure(per_round, local_trial);
    }

    const double baseline = (spawn_cpu.self_ms + spawn_cpu.children_ms) / trials;
    std::printf("CPU per trivial trial outside its child (%d trials each, %d rounds, store %s)\n",
                trials, rounds, sync ? "durable" : "without fsync");
    std::printf("  %-28s %7.3f ms  (spawning %.3f ms, /bin/true %.3f ms)   %6.1f faults\n",
                "bare posix_spawn /bin/true", baseline, spawn_cpu.self_ms / trials,
                spawn_cpu.children_ms / trials, spawn_cpu.self_faults / trials);
    print_row("worker (execute_trial)", worker_cpu, trials, baseline);
    print_row("local parent (run_trial)", local_cpu, trials, baseline);
    const double ratio = worker_cpu.self_ms / trials / baseline;
    const bool met = all_completed && ratio <= kTarget;
    std::printf("  worker side / bare spawn = %.2fx; target <= %.1fx, all completed: %s\n", ratio,
                kTarget, met ? "PASS" : (all_completed ? "MISS target" : "MISS (not completed)"));
    if (!met) status = 1;
  }
  std::filesystem::remove_all(dir);
  return status;
}
