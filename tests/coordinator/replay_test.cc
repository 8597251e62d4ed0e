// Record, then apply: a scheduler rebuilt from the records of another has its
// state, and decides what it would have decided.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/error.h"
#include "coordinator/scheduler.h"
#include "tests/coordinator/scheduler_support.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::digest;
using testing::Logged;
using testing::replayed;
using testing::trial;

constexpr SchedulerConfig kConfig = testing::kMorningConfig;
using testing::busy_morning;

std::set<std::string_view> kinds(const std::vector<OrchestrationRecord>& log) {
  std::set<std::string_view> seen;
  for (const OrchestrationRecord& record : log) seen.insert(record_type(record));
  return seen;
}

TEST_CASE("replaying the records rebuilds the same state and the same decisions",
          "[coordinator][replay]") {
  Logged live(kConfig);
  busy_morning(live);
  // The coordinator archives each finished job (coordinator/server_impl.h).
  while (const auto finished = live.scheduler.job_to_archive()) {
    const JobArchived archived{*finished, at(21'000)};
    live.scheduler.replay(archived);
    live.log.push_back(archived);
  }
  // Every record type but the heartbeat, which is never written, and a
  // snapshot's three (job.summary, trial.restored, job.restored).
  CHECK(kinds(live.log).size() == std::variant_size_v<OrchestrationRecord> - 4);
  CHECK(!kinds(live.log).contains(LeasesRenewed::kType));
  Scheduler again = replayed(live.log, kConfig);
  CHECK(again.state_text() == live.scheduler.state_text());
  for (const JobStatus& job : live.scheduler.jobs()) {
    const JobStatus rebuilt = *again.job_status(job.id);
    CHECK(rebuilt.counts == job.counts);
    CHECK(rebuilt.failed_attempts == job.failed_attempts);
    CHECK(rebuilt.fenced_reports == job.fenced_reports);
  }

  // Once recovered, as a restart does (which gives leases and workers the
  // time back), the same inputs from here on give the same records.
  const auto next = [](Scheduler& s) {
    Records records;
    const auto take = [&records](const Records& more) {
      records.insert(records.end(), more.begin(), more.end());
    };
    take(s.recover(at(22'400)));
    take(*s.worker_joined(WorkerHello{WorkerId{"w4"}, 5, 0, {digest(4)}}, at(22'000)));
    take(s.request_work(WorkerId{"w4"}, 5, at(22'000))->records);
    take(s.tick(at(40'000)));
    return records;
  };
  const Records decided = next(live.scheduler);
  CHECK(decided == next(again));
  CHECK(again.state_text() == live.scheduler.state_text());
}

TEST_CASE("records replay alike whatever the configuration of the scheduler replaying them",
          "[coordinator][replay]") {
  Logged live(kConfig);
  busy_morning(live);
  CHECK(replayed(live.log, SchedulerConfig{}).state_text() == live.scheduler.state_text());
}

TEST_CASE("a coordinator restarted in the middle of a job carries on from its log",
          "[coordinator][replay]") {
  Logged live(kConfig);
  live.submit(testing::job("a", 0, 8), at(0));
  live.join("w1", 2, at(0));
  live.join("w2", 2, at(0));
  CHECK(testing::names(live.work("w1", 2, at(1))) == std::vector<std::string>{"a#0", "a#1"});
  CHECK(testing::names(live.work("w2", 2, at(1))) == std::vector<std::string>{"a#2", "a#3"});
  live.report("w1", trial("a", 0), 1, at(2'000));
  live.reconcile(trial("a", 0), at(2'001));
  live.report("w2", trial("a", 2), 1, at(2'002));  // accepted, its reconciliation under way

  // The coordinator dies after writing these records; the next input's
  // records were decided but never written, so no one heard of them.
  const std::vector<OrchestrationRecord> written = live.log;
  const std::string at_crash = live.scheduler.state_text();
  live.work("w1", 1, at(2'003));

  // It restarts 30 s later, past every lease's expiry and the workers'
  // timeout: recovery gives both their time back.
  Logged restarted(kConfig);
  for (const OrchestrationRecord& record : written) restarted.scheduler.replay(record);
  restarted.log = written;
  CHECK(restarted.scheduler.state_text() == at_crash);
  CHECK(restarted.status(trial("a", 2)) == TrialStatus::reported);
  const Records recovered = restarted.keep(restarted.scheduler.recover(at(32'000)));
  // The leases are renewed in memory; only the lost report is recorded.
  REQUIRE(recovered.size() == 1);
  CHECK(std::get<TrialRequeued>(recovered[0]).reason ==
        "the coordinator restarted before it reconciled the report");
  const Instant renewed = at(32'000) + kConfig.lease_duration;
  CHECK(restarted.scheduler.trial_state(trial("a", 1))->lease_expires == renewed);
  CHECK(restarted.scheduler.trial_state(trial("a", 3))->lease_expires == renewed);
  CHECK(restarted.scheduler.worker_status(WorkerId{"w2"})->last_seen == at(32'000));
  CHECK(restarted.tick(at(32'000)).empty());
  CHECK(restarted.report("w2", trial("a", 2), 1, at(32'001)).verdict == ReportVerdict::fenced);

  // The workers report what they ran meanwhile, and the job completes.
  REQUIRE(restarted.report("w1", trial("a", 1), 1, at(32'002)).verdict == ReportVerdict::accepted);
  restarted.reconcile(trial("a", 1), at(32'003));
  REQUIRE(restarted.report("w2", trial("a", 3), 1, at(32'004)).verdict == ReportVerdict::accepted);
  restarted.reconcile(trial("a", 3), at(32'005));
  for (std::int64_t now = 33'000; !restarted.job("a").finished(); now += 1'000) {
    REQUIRE(now < 100'000);
    for (const char* worker : {"w1", "w2"}) {
      restarted.heartbeat(worker, {}, at(now));
      for (const Assignment& assignment : restarted.work(worker, 2, at(now))) {
        REQUIRE(restarted.report(worker, assignment.trial, assignment.attempt, at(now)).verdict ==
                ReportVerdict::accepted);
        restarted.reconcile(assignment.trial, at(now));
      }
    }
    restarted.tick(at(now));
  }
  const JobStatus job = restarted.job("a");
  CHECK(job.count(TrialStatus::reconciled) == 8);
  CHECK(job.failed_attempts == 1);
  CHECK(restarted.scheduler.trial_state(trial("a", 2))->attempt == 2);
  // The restarted coordinator's log, replayed once more, gives its state.
  CHECK(replayed(restarted.log).state_text() == restarted.scheduler.state_text());
}

TEST_CASE("a record that does not apply to the state is refused as corruption",
          "[coordinator][replay]") {
  Logged live(kConfig);
  busy_morning(live);
  const auto refused = [&](const OrchestrationRecord& record) {
    Scheduler s = replayed(live.log, kConfig);
    try {
      s.replay(record);
    } catch (const Error& error) {
      CHECK(error.code() == ErrorCode::internal);
      return std::string(error.what());
    }
    return std::string("applied");
  };
  CHECK(refused(JobSubmitted{JobId{"a"}, 0, "a", {}, at(30'000)}) ==
        "orchestration record job.submitted does not apply: job a exists");
  CHECK(refused(TrialLeased{trial("a", 99), 1, WorkerId{"w3"}, at(40'000), at(30'000)}) ==
        "orchestration record trial.leased does not apply: no trial a#99");
  CHECK(refused(TrialLeased{trial("b", 0), 1, WorkerId{"w3"}, at(40'000), at(30'000)}) ==
        "orchestration record trial.leased does not apply: b#0 is reconciled at attempt 1, not "
        "queued at attempt 1");
  CHECK(refused(TrialReconciled{trial("a", 5), 1, Outcome::completed, at(30'000)})
            .find("not reported at attempt 1") != std::string::npos);
  CHECK(refused(WorkerLost{WorkerId{"w1"}, "again", at(30'000)}) ==
        "orchestration record worker.lost does not apply: no live worker w1");
}

}  // namespace
}  // namespace forktrial::coordinator
