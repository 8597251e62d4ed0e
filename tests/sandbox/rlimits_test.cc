#include "sandbox/rlimits.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <map>

using namespace forktrial::sandbox;

TEST_CASE("both nets are applied with the CPU net at wall clock + 5 s", "[sandbox][nets]") {
  std::map<int, rlimit> applied;
  TrialLimits limits;
  limits.wall_clock_seconds = 2.2;
  limits.max_rss_bytes = 256u << 20;
  auto warnings = apply_nets(limits, [&](int resource, const rlimit& limit) {
    applied[resource] = limit;
    return 0;
  });
  CHECK(warnings.empty());
  REQUIRE(applied.count(RLIMIT_AS) == 1);
  CHECK(applied[RLIMIT_AS].rlim_cur == 256u << 20);
  REQUIRE(applied.count(RLIMIT_CPU) == 1);
  CHECK(applied[RLIMIT_CPU].rlim_cur == 8);
  CHECK(applied[RLIMIT_CPU].rlim_max == 9);
}

const char* const kMemoryOff =
    "memory net off: max_rss_bytes is not set, so neither RLIMIT_AS nor the Lua allocator cap "
    "bounds the trial's memory; the wall-clock kill, the CPU net and the event budget still bound "
    "the trial";

TEST_CASE("disabled nets are not applied, and no memory net is announced", "[sandbox][nets]") {
  TrialLimits limits;
  limits.wall_clock_seconds = 0;
  limits.max_rss_bytes.reset();
  std::vector<int> resources;
  auto warnings = apply_nets(limits, [&](int resource, const rlimit&) {
    resources.push_back(resource);
    return 0;
  });
  CHECK(warnings == std::vector<std::string>{kMemoryOff});
  CHECK(resources == std::vector<int>{RLIMIT_CORE});
  limits.max_rss_bytes = 0;
  CHECK(apply_nets(limits, [](int, const rlimit&) { return 0; }) ==
        std::vector<std::string>{kMemoryOff});
}

TEST_CASE("the memory net is on by default", "[sandbox][nets]") {
  std::map<int, rlimit> applied;
  auto warnings = apply_nets(TrialLimits{}, [&](int resource, const rlimit& limit) {
    applied[resource] = limit;
    return 0;
  });
  CHECK(warnings.empty());
  REQUIRE(applied.count(RLIMIT_AS) == 1);
  CHECK(applied[RLIMIT_AS].rlim_cur == TrialLimits::kDefaultMaxRssBytes);
  CHECK(TrialLimits::kDefaultMaxRssBytes == std::uint64_t{1} << 30);
}

TEST_CASE("max_cpu_seconds overrides the CPU net derived from the wall clock", "[sandbox][nets]") {
  TrialLimits limits;
  limits.wall_clock_seconds = 600;
  limits.max_cpu_seconds = 2;
  CHECK(cpu_seconds_for(limits) == 2);
  limits.max_cpu_seconds.reset();
  CHECK(cpu_seconds_for(limits) == 605);
}

TEST_CASE("a net the host refuses yields exactly one warning naming it", "[sandbox][nets]") {
  TrialLimits limits;
  limits.max_rss_bytes = 1000000;
  auto warnings = apply_nets(limits, [](int resource, const rlimit&) {
    if (resource == RLIMIT_AS) {
      errno = EINVAL;
      return -1;
    }
    return 0;
  });
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "memory net degraded: setrlimit(RLIMIT_AS, 1000000): Invalid argument; the Lua allocator "
        "cap, the wall-clock kill and the event budget still bound the trial");
}

TEST_CASE("the real setrlimit applies the nets to the calling process", "[sandbox][nets]") {
  // In a forked copy of this process: lowering a hard limit cannot be undone
  // without privilege, and this test process must keep its own limits. The
  // copy reports what it saw through its exit status.
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_CPU, &before) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    TrialLimits limits;
    limits.wall_clock_seconds = 3600;
    limits.max_rss_bytes = std::uint64_t{1} << 40;
    const auto warnings = apply_nets(limits, system_setrlimit());
    rlimit cpu{};
    rlimit as{};
    rlimit core{};
    const bool applied = ::getrlimit(RLIMIT_CPU, &cpu) == 0 && cpu.rlim_cur == 3605 &&
                         cpu.rlim_max == 3606 && ::getrlimit(RLIMIT_AS, &as) == 0 &&
                         as.rlim_cur == (rlim_t{1} << 40) && ::getrlimit(RLIMIT_CORE, &core) == 0 &&
                         core.rlim_cur == 0;
    ::_exit(!warnings.empty() ? 2 : applied ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  rlimit after{};
  REQUIRE(::getrlimit(RLIMIT_CPU, &after) == 0);
  CHECK(after.rlim_cur == before.rlim_cur);
  CHECK(after.rlim_max == before.rlim_max);
}

TEST_CASE("a trial's isolation names each net applied, degraded by the host, or off",
          "[sandbox][nets]") {
  TrialLimits limits;
  limits.wall_clock_seconds = 2;
  limits.max_rss_bytes = 256u << 20;
  // The host refuses both rlimits: the warnings apply_nets writes degrade
  // exactly those two nets.
  auto warnings = apply_nets(limits, [](int resource, const rlimit&) {
    errno = EPERM;
    return resource == RLIMIT_CORE ? 0 : -1;
  });
  REQUIRE(warnings.size() == 2);
  const TrialIsolation standard = trial_isolation(Isolation::standard, limits, warnings);
  CHECK(standard.level == Isolation::standard);
  std::map<std::string, TrialNet> nets;
  std::vector<std::string> order;
  for (const TrialNet& net : standard.nets) {
    nets[net.name] = net;
    order.push_back(net.name);
  }
  CHECK(order == std::vector<std::string>{"process", "memory", "cpu", "wall_clock", "write_budget",
                                          "environment", "namespaces", "filesystem", "seccomp",
                                          "cgroup", "privileges"});
  CHECK(nets["process"].state == NetState::applied);
  CHECK(nets["memory"].state == NetState::degraded);
  CHECK(nets["memory"].detail == warnings[0]);
  CHECK(nets["cpu"].state == NetState::degraded);
  CHECK(nets["wall_clock"].state == NetState::applied);
  CHECK(nets["seccomp"].state == NetState::off);
  CHECK(nets["cgroup"].detail == "not asked for: the trial ran under standard isolation");

  // Strict, on a host without cgroups: that net degraded, the others applied;
  // a trial without a memory limit has that net off.
  limits.max_rss_bytes.reset();
  const std::vector<std::string> strict_warnings{
      "cgroup net unavailable: no hierarchy; the trial's real memory and task count are not "
      "capped"};
  const TrialIsolation strict = trial_isolation(Isolation::strict, limits, strict_warnings);
  for (const TrialNet& net : strict.nets) {
    INFO(net.name);
    const NetState expected = net.name == "cgroup"   ? NetState::degraded
                              : net.name == "memory" ? NetState::off
                                                     : NetState::applied;
    CHECK(net.state == expected);
  }
  CHECK(isolation_json(strict).starts_with(
      R"({"level":"strict","nets":[{"name":"process","state":"applied","detail":)"));
}
