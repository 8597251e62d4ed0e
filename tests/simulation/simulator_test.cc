// The cluster in virtual time: many seeds of a faulty cluster, each checked
// at every step by the referee (simulation/invariants.h); a seed that replays
// the same run; the command that runs it.
#include "simulation/simulator.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "tests/support/temp_dir.h"

namespace forktrial::simulation {
namespace {

using forktrial::testing::run_command;
using forktrial::testing::TempDir;

Config faulty(const TempDir& dir, std::uint64_t seed) {
  Config config;
  config.seed = seed;
  config.faults = every_fault();
  config.store_dir = dir.path() / ("seed-" + std::to_string(seed));
  return config;
}

std::string replay_hint(std::uint64_t seed) {
  return "replay: forktrial-simulate --seed " + std::to_string(seed);
}

TEST_CASE("many seeds of a faulty cluster keep every promise", "[simulation]") {
  TempDir dir;
  Report total;
#ifdef FORKTRIAL_SANITIZED
  constexpr std::uint64_t kSeeds = 8;  // the sanitizers' cost: a fifth of the seeds
#else
  constexpr std::uint64_t kSeeds = 40;
#endif
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const Report report = simulate(faulty(dir, seed));
    INFO(replay_hint(seed));
    REQUIRE_FALSE(report.violation.has_value());
    CHECK(report.reconciled + report.abandoned + report.cancelled == 1000);
    total.lost += report.lost;
    total.duplicated += report.duplicated;
    total.worker_crashes += report.worker_crashes;
    total.worker_stalls += report.worker_stalls;
    total.coordinator_restarts += report.coordinator_restarts;
    total.store_full_episodes += report.store_full_episodes;
    total.busy_replies += report.busy_replies;
    total.fenced += report.fenced;
    total.duplicates += report.duplicates;
    total.deltas_refused += report.deltas_refused;
    total.requeued += report.requeued;
    total.workers_lost += report.workers_lost;
    total.cancelled += report.cancelled;
  }
  // The seeds met every hazard: runs that met none would prove little.
  CHECK(total.lost > 0);
  CHECK(total.duplicated > 0);
  CHECK(total.worker_crashes > 0);
  CHECK(total.worker_stalls > 0);
  CHECK(total.coordinator_restarts > 0);
  CHECK(total.store_full_episodes > 0);
  CHECK(total.busy_replies > 0);
  CHECK(total.fenced > 0);
  CHECK(total.duplicates > 0);
  // The store refused a delta: the coordinator recorded the report without
  // it, and acknowledged it accepted.
  CHECK(total.deltas_refused > 0);
  CHECK(total.requeued > 0);
  CHECK(total.workers_lost > 0);
  CHECK(total.cancelled > 0);
}

TEST_CASE("seeds of a faulty cluster whose coordinator compacts its log often keep every promise",
          "[simulation][snapshot]") {
  TempDir dir;
#ifdef FORKTRIAL_SANITIZED
  constexpr std::uint64_t kSeeds = 8;
#else
  constexpr std::uint64_t kSeeds = 40;
#endif
  std::uint64_t restarts = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    Config config = faulty(dir, seed);
    config.compact_log_after = 50;
    config.compact_log_ratio = 1;
    const Report report = simulate(config);
    INFO(replay_hint(seed) << " --compact-log-after 50 --compact-log-ratio 1");
    REQUIRE_FALSE(report.violation.has_value());
    CHECK(report.reconciled + report.abandoned + report.cancelled == 1000);
    // The log was replaced by snapshots again and again.
    CHECK(report.log_generation >= 3);
    restarts += report.coordinator_restarts;
  }
  CHECK(restarts > 0);  // restarts read snapshots, and the referee compared them
}

TEST_CASE("a seed replays the same run event for event", "[simulation]") {
  TempDir dir;
  const Report first = simulate(faulty(dir, 7));
  const Report again = simulate(faulty(dir, 7));
  const Report other = simulate(faulty(dir, 8));
  CHECK(first.trace == again.trace);
  CHECK(first.events == again.events);
  CHECK(first.virtual_time == again.virtual_time);
  CHECK(first.reconciled == again.reconciled);
  CHECK(first.fenced == again.fenced);
  CHECK(first.records == again.records);
  CHECK(first.trace != other.trace);
}

TEST_CASE("a quiet cluster of many workers finishes every trial", "[simulation]") {
  TempDir dir;
  Config config;
  config.workers = 300;
#ifdef FORKTRIAL_SANITIZED
  constexpr std::uint64_t kTrials = 5'000;  // the sanitizers' cost: a quarter of the trials
#else
  constexpr std::uint64_t kTrials = 20'000;
#endif
  config.trials = kTrials;
  config.jobs = 12;
  config.store_dir = dir.path() / "store";
  const Report report = simulate(config);
  INFO(report.violation.value_or(""));
  REQUIRE_FALSE(report.violation.has_value());
  CHECK(report.reconciled + report.abandoned + report.cancelled == kTrials);
  CHECK(report.coordinator_restarts == 0);
  CHECK(report.lost == 0);
  CHECK(report.fenced == 0);
}

TEST_CASE("a simulation without workers, trials or a store is refused", "[simulation]") {
  TempDir dir;
  Config config;
  config.store_dir = dir.path() / "store";
  config.workers = 0;
  CHECK_THROWS_AS(simulate(config), Error);
  config.workers = 2;
  config.store_dir.clear();
  CHECK_THROWS_AS(simulate(config), Error);
}

TEST_CASE("forktrial-simulate runs seeds and prints each run", "[simulation][command]") {
  TempDir dir;
  auto result = run_command({FORKTRIAL_SIMULATE, "--seed", "3", "--seeds", "2", "--trials", "300",
                             "--json", "--store", (dir.path() / "stores").string()});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto lines = forktrial::testing::lines_of(result.out);
  REQUIRE(lines.size() == 2);
  const auto run = nlohmann::json::parse(lines[1]);
  CHECK(run["seed"] == 4);
  CHECK(run["ok"] == true);
  CHECK(run["reconciled"].get<int>() + run["abandoned"].get<int>() + run["cancelled"].get<int>() ==
        300);
  CHECK(run["coordinator_peak_bytes"].get<std::int64_t>() > 0);
  CHECK(run["trace"].get<std::string>().size() == 16);

  auto text = run_command({FORKTRIAL_SIMULATE, "--trials", "200", "--faults", "none"});
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("every promise kept") != std::string::npos);
  CHECK(text.out.find("trials/s of real time") != std::string::npos);

  auto bad = run_command({FORKTRIAL_SIMULATE, "--faults", "some"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--faults") != std::string::npos);
  // A count out of range is refused by name, never wrapped into a huge run.
  for (const char* option : {"--trials", "--workers", "--jobs", "--loss"}) {
    auto negative = run_command({FORKTRIAL_SIMULATE, option, "-5"});
    INFO(option << ": " << negative.err);
    CHECK(negative.exit_code == 2);
    CHECK(negative.err.find(option) != std::string::npos);
  }
}

}  // namespace
}  // namespace forktrial::simulation
