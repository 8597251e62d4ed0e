// The referee: each promise it keeps watch over, broken on purpose by a
// handmade sequence of records, is named; a sequence that keeps them passes.
#include "simulation/invariants.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "coordinator/scheduler.h"

namespace forktrial::simulation {
namespace {

using namespace coordinator;

Instant at(std::int64_t ms) {
  return Instant{Duration{ms}};
}

JobSubmitted job(const std::string& id, int priority, std::size_t trials) {
  JobSubmitted submitted{JobId{id}, priority, id, {}, at(0)};
  for (std::size_t i = 0; i < trials; ++i) {
    submitted.trials.push_back(TrialInput{"t", Sha256::of("segment"), {}});
  }
  return submitted;
}

TrialId trial(const std::string& job, std::uint32_t index) {
  return TrialId{JobId{job}, index};
}

TrialLeased lease(const std::string& job, std::uint32_t index, Attempt attempt,
                  const std::string& worker) {
  return TrialLeased{trial(job, index), attempt, WorkerId{worker}, at(10'000), at(1)};
}

// Feeds `records` one commit each; returns the first violation.
std::string referee(Invariants& invariants, const std::vector<OrchestrationRecord>& records) {
  for (const OrchestrationRecord& record : records) {
    if (auto broken = invariants.committed({&record, 1})) return *broken;
  }
  return "";
}

TEST_CASE("the referee passes a run that keeps every promise", "[simulation][invariants]") {
  Invariants invariants;
  const std::vector<OrchestrationRecord> records{
      job("a", 0, 2),
      WorkerJoined{WorkerId{"w1"}, 2, 0, {}, at(0)},
      lease("a", 0, 1, "w1"),
      lease("a", 1, 1, "w1"),
      LeasesRenewed{WorkerId{"w1"}, {{trial("a", 0), 1}, {trial("a", 1), 1}}, at(9'000), at(2)},
      TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(3)},
      TrialReconciled{trial("a", 0), 1, Outcome::completed, at(3)},
      TrialRequeued{trial("a", 1), 1, "lapsed", at(4)},
      TrialFenced{trial("a", 1), 1, WorkerId{"w1"}, "superseded", at(5)},
      lease("a", 1, 2, "w1"),
      TrialReported{trial("a", 1), 2, WorkerId{"w1"}, at(6)},
      TrialReconciled{trial("a", 1), 2, Outcome::completed, at(6)},
      WorkerLost{WorkerId{"w1"}, "gone", at(7)},
  };
  CHECK(referee(invariants, records).empty());
  CHECK(invariants.report_acknowledged(trial("a", 1), 2) == std::nullopt);
  CHECK(invariants.ended() == 2);
}

TEST_CASE("the referee names leases that overlap", "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken =
      referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"), lease("a", 0, 2, "w2")});
  CHECK(broken.find("leases overlap") != std::string::npos);
  CHECK(broken.find("a#0 attempt 2") != std::string::npos);
}

TEST_CASE("the referee names an attempt leased again", "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken = referee(
      invariants, {job("a", 0, 1), lease("a", 0, 2, "w1"),
                   TrialRequeued{trial("a", 0), 2, "lapsed", at(2)}, lease("a", 0, 1, "w1")});
  CHECK(broken.find("leased after attempt 2") != std::string::npos);
}

TEST_CASE("the referee names a trial reconciled twice", "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken =
      referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                           TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(2)},
                           TrialReconciled{trial("a", 0), 1, Outcome::completed, at(3)},
                           TrialReconciled{trial("a", 0), 1, Outcome::completed, at(4)}});
  CHECK(broken.find("reconciled twice") != std::string::npos);
}

TEST_CASE("the referee names a report accepted from a worker without the lease",
          "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken =
      referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                           TrialReported{trial("a", 0), 1, WorkerId{"w2"}, at(2)}});
  CHECK(broken.find("not the trial's live lease") != std::string::npos);
}

TEST_CASE("the referee names the live holder's report fenced", "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken =
      referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                           TrialFenced{trial("a", 0), 1, WorkerId{"w1"}, "no reason", at(2)}});
  CHECK(broken.find("live lease's holder, was fenced") != std::string::npos);
}

TEST_CASE("the referee names a worker lost with its leases", "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken = referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                                                  WorkerLost{WorkerId{"w1"}, "gone", at(2)}});
  CHECK(broken.find("lost holding 1 leases") != std::string::npos);
}

TEST_CASE("the referee names a renewal of a lease the worker does not hold",
          "[simulation][invariants]") {
  Invariants invariants;
  const std::string broken =
      referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                           LeasesRenewed{WorkerId{"w2"}, {{trial("a", 0), 1}}, at(9), at(2)}});
  CHECK(broken.find("a lease it does not hold") != std::string::npos);
}

TEST_CASE("the referee names a report acknowledged before it was committed",
          "[simulation][invariants]") {
  Invariants invariants;
  CHECK(referee(invariants, {job("a", 0, 1), lease("a", 0, 1, "w1"),
                             TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(2)}})
            .empty());
  const auto broken = invariants.report_acknowledged(trial("a", 0), 1);
  REQUIRE(broken.has_value());
  CHECK(broken->find("before its reconciliation was committed") != std::string::npos);
}

TEST_CASE("the referee names a job starved by its round or by a lower priority",
          "[simulation][invariants]") {
  SECTION("its round") {
    Invariants invariants;
    // Two jobs of one priority: b is leased twice in a row while a waits.
    const std::string broken =
        referee(invariants,
                {job("a", 0, 3), job("b", 0, 3), lease("b", 0, 1, "w1"), lease("b", 1, 1, "w1")});
    CHECK(broken.find("job a starves") != std::string::npos);
  }
  SECTION("taking turns is fair") {
    Invariants invariants;
    CHECK(referee(invariants,
                  {job("a", 0, 3), job("b", 0, 3), lease("b", 0, 1, "w1"), lease("a", 0, 1, "w1"),
                   lease("b", 1, 1, "w1"), lease("a", 1, 1, "w1")})
              .empty());
  }
  SECTION("a lower priority") {
    Invariants invariants;
    const std::string broken =
        referee(invariants, {job("a", 2, 1), job("b", 0, 1), lease("b", 0, 1, "w1")});
    CHECK(broken.find("while job a (priority 2) has 1 queued") != std::string::npos);
  }
}

TEST_CASE("the referee checks a restarted scheduler and the end", "[simulation][invariants]") {
  Invariants invariants;
  const std::vector<OrchestrationRecord> records{
      job("a", 0, 1), WorkerJoined{WorkerId{"w1"}, 1, 0, {}, at(0)}, lease("a", 0, 1, "w1"),
      TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(2)},
      TrialReconciled{trial("a", 0), 1, Outcome::completed, at(3)}};
  REQUIRE(referee(invariants, records).empty());
  invariants.job_acknowledged(JobId{"a"});
  // A scheduler that holds the whole log agrees.
  Scheduler whole;
  for (const auto& record : records) whole.replay(record);
  CHECK(invariants.after_restart(whole) == std::nullopt);
  CHECK(invariants.at_end(whole) == std::nullopt);
  // One that lost the last commit does not.
  Scheduler short_one;
  for (std::size_t i = 0; i + 2 < records.size(); ++i) short_one.replay(records[i]);
  const auto lost = invariants.after_restart(short_one);
  REQUIRE(lost.has_value());
  CHECK(lost->find("a#0 was reconciled, but not after the restart") != std::string::npos);
  const auto end = invariants.at_end(short_one);
  REQUIRE(end.has_value());
  CHECK(end->find("but the coordinator says leased") != std::string::npos);
  // One without the job at all.
  CHECK(invariants.after_restart(Scheduler{})->find("job a, acknowledged to its client,") !=
        std::string::npos);
}

}  // namespace
}  // namespace forktrial::simulation
