#include "coordinator/activity.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/coordinator/scheduler_support.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::trial;

std::vector<std::string> failed(const Activity& activity) {
  std::vector<std::string> out;
  for (const auto& failure : activity.failures()) out.push_back(failure.trial.str());
  return out;
}

JobStatus running(const std::string& id, Instant submitted) {
  JobStatus job;
  job.id = JobId{id};
  job.trials = 1000;
  job.submitted_at = submitted;
  return job;
}

TEST_CASE("the failures kept are the trials that ended without completing, newest first",
          "[coordinator][activity]") {
  Activity activity;
  activity.note(TrialReconciled{trial("a", 0), 1, Outcome::completed, at(1)});
  activity.note(TrialReconciled{trial("a", 1), 1, Outcome::crashed, at(2)});
  activity.note(TrialRequeued{trial("a", 2), 1, "lease lapsed", at(3)});
  activity.note(TrialAbandoned{trial("a", 2), 3, {"x", "y", "z"}, at(4)});
  activity.note(TrialReconciled{trial("b", 0), 1, Outcome::scenario_failed, at(5)});
  CHECK(failed(activity) == std::vector<std::string>{"b#0", "a#2", "a#1"});
  CHECK(activity.failures().front().at == at(5));
  activity.clear();
  CHECK(activity.failures().empty());
}

TEST_CASE("the failures kept are bounded, the oldest going first", "[coordinator][activity]") {
  Activity activity;
  const auto total = static_cast<std::uint32_t>(Activity::kFailuresKept + 20);
  for (std::uint32_t i = 0; i < total; ++i) {
    activity.note(TrialReconciled{trial("a", i), 1, Outcome::crashed, at(i)});
  }
  REQUIRE(activity.failures().size() == Activity::kFailuresKept);
  CHECK(activity.failures().front().trial == trial("a", total - 1));
  CHECK(activity.failures().back().trial == trial("a", 20));
}

TEST_CASE("a running job's throughput counts the trials that ended in the last minute",
          "[coordinator][activity]") {
  Activity activity;
  // 30 trials ended in the job's first 10 s; 60 more between 100 s and 130 s.
  for (int i = 0; i < 30; ++i) {
    activity.note(TrialReconciled{trial("a", i), 1, Outcome::completed, at(i * 333)});
  }
  const JobStatus job = running("a", at(0));
  // Young: since its submission.
  CHECK(activity.throughput(job, at(10'000)) == Approx(3.0).epsilon(0.05));
  // Nothing ended in the last minute.
  CHECK(activity.throughput(job, at(100'000)) == 0.0);
  for (int i = 0; i < 60; ++i) {
    activity.note(TrialAbandoned{trial("a", 30 + i), 3, {}, at(100'000 + i * 500)});
  }
  CHECK(activity.throughput(job, at(130'000)) == Approx(1.0).epsilon(0.05));
  CHECK(activity.throughput(running("other", at(0)), at(130'000)) == 0.0);
}

TEST_CASE("a finished job's throughput is over its whole run", "[coordinator][activity]") {
  Activity activity;
  JobStatus job = running("a", at(0));
  job.trials = 40;
  job.counts[static_cast<std::size_t>(TrialStatus::reconciled)] = 30;
  job.counts[static_cast<std::size_t>(TrialStatus::abandoned)] = 10;
  job.finished_at = at(20'000);
  CHECK(activity.throughput(job, at(500'000)) == Approx(2.0));
  // Finished the moment it was submitted (no trial, or all cancelled).
  job.finished_at = job.submitted_at;
  CHECK(activity.throughput(job, at(500'000)) == Approx(40'000.0));
}

}  // namespace
}  // namespace forktrial::coordinator
