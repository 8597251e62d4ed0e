// Strict isolation (sandbox/isolation.h) against a child that tries what the
// nets refuse: the hostile stand-in child (hostile_child.cc) confines itself
// exactly as forktrial-child does and is started through the same strict
// spawn path, then reads /etc/passwd, looks for other processes, opens a
// socket, forks and starts threads. Each attempt is refused and the report
// says by which net. A control under standard isolation shows the probes can
// see what strict hides. Skipped, with the reason, where the host cannot
// make user namespaces or load a seccomp filter.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/isolation.h"
#include "sandbox/trial.h"
#include "tests/sandbox/trial_fixture.h"
#include "tests/support/skip.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using forktrial::testing::contains;

namespace {

// `candidate` run by the real forktrial-child under strict isolation;
// nullopt, after saying why, where the host cannot apply the nets.
std::optional<TrialReport> strict_lua_trial(testing::TrialFixture& f, const PackSource& candidate,
                                            const TrialLimits& limits = {}) {
  if (const auto why = testing::strict_unavailable()) {
    forktrial::testing::skip(*why);
    return std::nullopt;
  }
  ChildOptions options;
  options.isolation = Isolation::strict;
  return f.trial(candidate, "scenarios/main.lua", limits, {}, options);
}

struct Probe {
  testing::TrialFixture f;

  // The hostile child in `mode` under strict isolation; nullopt, after
  // saying why, where the host cannot apply the nets in `needed`.
  std::optional<TrialReport> strict(const std::string& mode,
                                    std::vector<std::string> needed = {"namespaces", "seccomp"}) {
    if (const auto why = testing::strict_unavailable(std::move(needed))) {
      forktrial::testing::skip(*why);
      return std::nullopt;
    }
    return run(mode, Isolation::strict);
  }

  // The hostile child in `mode`, under `isolation`.
  TrialReport run(const std::string& mode, Isolation isolation) {
    ChildOptions options;
    options.child_path = FORKTRIAL_HOSTILE_CHILD;
    options.extra_env = {"FORKTRIAL_HOSTILE=" + mode};
    options.isolation = isolation;
    TrialLimits limits;
    limits.wall_clock_seconds = 30;
    return f.trial(f.pack(testing::scenario_only("")), "scenarios/main.lua", limits, {}, options);
  }
};

}  // namespace

TEST_CASE("a strict trial cannot read /etc/passwd, which a standard trial can", "[trial][strict]") {
  Probe probe;
  const auto strict = probe.strict("passwd");
  if (!strict) return;
  INFO(strict->detail);
  CHECK(strict->outcome == Outcome::completed);
  CHECK(contains(strict->detail, "open(/etc/passwd): No such file or directory"));
  testing::check_no_degraded_net(strict->warnings);

  const auto standard = probe.run("passwd", Isolation::standard);
  INFO(standard.detail);
  CHECK(contains(standard.detail, "read /etc/passwd: 64 bytes"));
}

TEST_CASE("a strict trial sees only its own processes, not its parent", "[trial][strict]") {
  Probe probe;
  const auto report = probe.strict("processes");
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::completed);
  // Its init (1) and itself (2): nothing of the host's.
  CHECK(contains(report->detail, "pids in /proc: 1 2\n"));
  CHECK(contains(report->detail, "): No such file or directory"));
}

TEST_CASE("a strict trial's only network interface is its own namespace's loopback",
          "[trial][strict]") {
  Probe probe;
  const auto report = probe.strict("netdev");
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::completed);
  CHECK(report->detail == "interfaces: lo");
}

TEST_CASE("a strict trial that opens a socket is killed and the report names the call",
          "[trial][strict]") {
  Probe probe;
  const auto report = probe.strict("socket");
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::crashed);
  CHECK(report->exit_code == -SIGSYS);
  CHECK(contains(report->detail, "strict filter: system call socket ("));
  CHECK_FALSE(contains(report->detail, "opened"));
}

TEST_CASE("a strict trial's fork bomb is refused at its first fork, named", "[trial][strict]") {
  Probe probe;
  const auto report = probe.strict("forkbomb");
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::crashed);
  CHECK(contains(report->detail, "strict filter: system call clone ("));
}

TEST_CASE("a strict trial that starts threads without end is stopped by its cgroup's pids limit",
          "[trial][strict]") {
  Probe probe;
  const auto report = probe.strict("threadbomb", {"namespaces", "seccomp", "cgroup"});
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::limits_exceeded);
  CHECK(contains(report->detail, "pids net: the trial tried to hold more than " +
                                     std::to_string(kStrictMaxTasks) + " tasks"));
  // The child's own account: the limit refused a thread, not something else.
  CHECK(contains(report->detail, ": Resource temporarily unavailable"));
}

TEST_CASE("a strict Lua trial that spins is stopped by the CPU net, through the child's init",
          "[trial][strict]") {
  // The trial is not PID 1 of its namespace (which would ignore SIGXCPU):
  // its init reports the signal, and the parent reads it back as SIGXCPU.
  testing::TrialFixture f;
  TrialLimits limits;
  limits.wall_clock_seconds = 60;
  limits.max_cpu_seconds = 1;
  const auto report =
      strict_lua_trial(f, f.pack(testing::scenario_only("while true do end")), limits);
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::limits_exceeded);
  CHECK(report->exit_code == -SIGXCPU);
  CHECK(contains(report->detail, "CPU net"));
  testing::check_no_degraded_net(report->warnings);
}

TEST_CASE("a strict trial finds a pack given relative to the working directory",
          "[trial][strict]") {
  // The child's new root keeps the working directory's path, so a relative
  // pack path (as the README's examples/packs/...) resolves as before.
  testing::TrialFixture f;
  PackSource candidate = f.pack(testing::scenario_only(""));
  candidate.root_dir = std::filesystem::relative(candidate.root_dir).string();
  REQUIRE(std::filesystem::path(candidate.root_dir).is_relative());
  const auto report = strict_lua_trial(f, candidate);
  if (!report) return;
  INFO(report->detail);
  CHECK(report->outcome == Outcome::completed);
  testing::check_no_degraded_net(report->warnings);
}
