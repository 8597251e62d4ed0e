// The scheduler's decisions, one input at a time, in virtual time.
#include "coordinator/scheduler.h"

#include <catch2/catch.hpp>
#include <string>
#include <variant>
#include <vector>

#include "tests/coordinator/scheduler_support.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::digest;
using testing::Logged;
using testing::names;
using testing::trial;
using Names = std::vector<std::string>;

// Leases shorter than the worker timeout, so that a test sees one or the other.
constexpr SchedulerConfig kShortLeases{Duration{10'000}, Duration{60'000}, 3};

template <typename Record>
Record only(const Records& records) {
  REQUIRE(records.size() == 1);
  REQUIRE(std::holds_alternative<Record>(records[0]));
  return std::get<Record>(records[0]);
}

TEST_CASE("jobs of higher priority are served first", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("low", 0, 3), at(0));
  s.submit(testing::job("high", 5, 2), at(1));
  s.join("w1", 8, at(2));
  CHECK(names(s.work("w1", 4, at(3))) == Names{"high#0", "high#1", "low#0", "low#1"});
  CHECK(s.scheduler.queued_trials() == 1);
}

TEST_CASE("jobs of equal priority take turns so a large job cannot starve a small one",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("big", 0, 100), at(0));
  s.submit(testing::job("small", 0, 2), at(1));
  s.submit(testing::job("other", 1, 0), at(2));  // an empty job is never anyone's turn
  s.join("w1", 10, at(3));
  CHECK(names(s.work("w1", 3, at(4))) == Names{"big#0", "small#0", "big#1"});
  s.join("w2", 10, at(5));
  CHECK(names(s.work("w2", 3, at(6))) == Names{"small#1", "big#2", "big#3"});
  CHECK(s.job("small").count(TrialStatus::leased) == 2);
  CHECK(s.job("other").finished());
}

TEST_CASE("a worker is given the trials whose digests it holds", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 10), at(0));
  s.join("warm", 1, at(1), {digest(7), digest(1000)});
  s.join("cold", 1, at(1));
  CHECK(names(s.work("warm", 1, at(2))) == Names{"a#7"});
  CHECK(names(s.work("cold", 1, at(2))) == Names{"a#0"});
}

TEST_CASE("a worker prefers the digests of trials it was leased before",
          "[coordinator][scheduler]") {
  Logged s;
  JobSubmission job{JobId{"a"}, 0, "a", {}};
  for (const int segment : {5, 6, 7, 5, 6}) job.trials.push_back(testing::trial_input(segment));
  s.submit(std::move(job), at(0));
  s.join("w1", 5, at(1));
  CHECK(names(s.work("w1", 1, at(2))) == Names{"a#0"});
  CHECK(names(s.work("w1", 1, at(3))) == Names{"a#3"});  // segment 5 again
  CHECK(names(s.work("w1", 3, at(4))) == Names{"a#1", "a#4", "a#2"});
  CHECK(s.scheduler.worker_status(WorkerId{"w1"})->cached_digests == 4);
}

TEST_CASE("a worker gets no more trials than its free slots", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 10), at(0));
  s.join("w1", 2, at(1));
  CHECK(s.work("w1", 5, at(2)).size() == 2);
  CHECK(s.work("w1", 5, at(3)).empty());  // it holds two leases of its two slots
  CHECK(s.report("w1", trial("a", 0), 1, at(4)).verdict == ReportVerdict::accepted);
  CHECK(s.work("w1", 5, at(5)).size() == 1);
  CHECK(s.work("w1", 0, at(6)).empty());
  const WorkerStatus worker = *s.scheduler.worker_status(WorkerId{"w1"});
  CHECK(worker.leases == 2);
  CHECK(worker.slots == 2);
  CHECK(worker.last_seen == at(1));
}

TEST_CASE("a worker's prefetch adds room for assignments waiting to start",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 10), at(0));
  s.keep(s.scheduler.worker_joined(WorkerHello{WorkerId{"w1"}, 2, 3, {}}, at(1)));
  CHECK(s.work("w1", 9, at(2)).size() == 5);  // two slots and three waiting
  CHECK(s.work("w1", 9, at(3)).empty());
  CHECK(s.report("w1", trial("a", 0), 1, at(4)).verdict == ReportVerdict::accepted);
  CHECK(s.work("w1", 9, at(5)).size() == 1);
  const WorkerStatus worker = *s.scheduler.worker_status(WorkerId{"w1"});
  CHECK(worker.slots == 2);
  CHECK(worker.prefetch == 3);
  CHECK(worker.leases == 5);
  // Shown as its two slots running and three prefetched, never 5 running.
  CHECK(worker.running() == 2);
  CHECK(worker.prefetched() == 3);
}

TEST_CASE("a worker's running trials never exceed its slots, the rest of its leases are prefetched",
          "[coordinator][scheduler]") {
  struct Case {
    std::uint32_t leases, running, prefetched;
  };
  for (const Case want : {Case{0, 0, 0}, Case{3, 3, 0}, Case{4, 4, 0}, Case{11, 4, 7}}) {
    WorkerStatus worker;
    worker.slots = 4;
    worker.leases = want.leases;
    CAPTURE(want.leases);
    CHECK(worker.running() == want.running);
    CHECK(worker.prefetched() == want.prefetched);
  }
}

TEST_CASE("a lease that is not renewed expires and its trial is queued with the next attempt",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("w1", 1, at(0));
  const auto leased = s.work("w1", 1, at(0));
  REQUIRE(leased.size() == 1);
  CHECK(leased[0].attempt == 1);
  CHECK(leased[0].expires == at(10'000));
  CHECK(s.tick(at(9'999)).empty());
  const auto& requeued = only<TrialRequeued>(s.tick(at(10'000)));
  CHECK(requeued.attempt == 1);
  CHECK(requeued.reason.find("lease on worker w1 expired at") == 0);
  const TrialState state = *s.scheduler.trial_state(trial("a", 0));
  CHECK(state.status == TrialStatus::queued);
  CHECK(state.attempt == 2);
  CHECK(state.reasons == std::vector{requeued.reason});
  const auto again = s.work("w1", 1, at(10'001));
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempt == 2);
  CHECK(s.job("a").failed_attempts == 1);
}

TEST_CASE("a heartbeat renews the worker's leases and names the attempts it should stop",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 2), at(0));
  s.join("w1", 1, at(0));
  s.join("w2", 1, at(0));
  REQUIRE(s.work("w1", 1, at(0)).size() == 1);
  REQUIRE(s.work("w2", 1, at(0)).size() == 1);
  const std::vector<AttemptRef> running{
      {trial("a", 0), 1}, {trial("a", 1), 1}, {trial("a", 0), 7}, {trial("nope", 0), 1}};
  const std::size_t logged = s.log.size();
  const HeartbeatResult beat = s.heartbeat("w1", running, at(8'000));
  CHECK(beat.stale == std::vector<AttemptRef>(running.begin() + 1, running.end()));
  // Renewed in memory: liveness adds nothing to the log.
  CHECK(s.log.size() == logged);
  CHECK(s.scheduler.trial_state(trial("a", 0))->lease_expires == at(18'000));
  CHECK(s.scheduler.worker_status(WorkerId{"w1"})->last_seen == at(8'000));
  // w2's lease was not renewed.
  const auto& requeued = only<TrialRequeued>(s.tick(at(10'000)));
  CHECK(requeued.trial == trial("a", 1));
  CHECK(s.tick(at(17'999)).empty());
  CHECK(only<TrialRequeued>(s.tick(at(18'000))).trial == trial("a", 0));
}

TEST_CASE("heartbeats cannot hold a trial past its run limit and a lease each side of it",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);  // 10 s leases
  JobSubmission submission = testing::job("a", 0, 4);
  for (auto& input : submission.trials) input.run_limit = Duration{5'000};
  s.submit(std::move(submission), at(0));
  s.keep(s.scheduler.worker_joined(WorkerHello{WorkerId{"w1"}, 2, 2, {}}, at(0)));
  const auto leased = s.work("w1", 4, at(0));
  REQUIRE(leased.size() == 4);
  // Two start now: deadline 10 + 5 + 10 s. Two wait for a slot: one run
  // limit more.
  std::vector<Instant> deadlines;
  for (const auto& record : s.log) {
    if (const auto* lease = std::get_if<TrialLeased>(&record)) deadlines.push_back(lease->deadline);
  }
  CHECK(deadlines == std::vector{at(25'000), at(25'000), at(30'000), at(30'000)});
  // The worker heartbeats every 5 s, naming all four, and never reports.
  std::vector<AttemptRef> running;
  for (const auto& a : leased) running.push_back({a.trial, a.attempt});
  for (std::int64_t t = 5'000; t < 25'000; t += 5'000) {
    s.heartbeat("w1", running, at(t));
    CHECK(s.tick(at(t)).empty());
  }
  // At 20 s the renewal asked for 30 s; the lease ends at its deadline.
  CHECK(s.scheduler.trial_state(trial("a", 0))->lease_expires == at(25'000));
  const Records lapsed = s.tick(at(25'000));
  REQUIRE(lapsed.size() == 2);
  const auto& first = std::get<TrialRequeued>(lapsed[0]);
  CHECK_THAT(first.reason, Catch::StartsWith("worker w1 held it to its deadline") &&
                               Catch::Contains("run limit of 5000 ms") &&
                               Catch::Contains("heartbeats do not extend an attempt past it"));
  s.heartbeat("w1", running, at(26'000));
  CHECK(s.tick(at(29'999)).empty());
  CHECK(s.tick(at(30'000)).size() == 2);
  // Replayed, the log rebuilds the same leases and deadlines.
  CHECK(testing::replayed(s.log, kShortLeases).state_text() == s.scheduler.state_text());
}

TEST_CASE("a trial without a run limit keeps its lease while heartbeats renew it",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("w1", 1, at(0));
  const auto leased = s.work("w1", 1, at(0));
  REQUIRE(leased.size() == 1);
  for (std::int64_t t = 5'000; t <= 100'000; t += 5'000) {
    s.heartbeat("w1", {{leased[0].trial, 1}}, at(t));
    CHECK(s.tick(at(t)).empty());
  }
}

TEST_CASE("a worker offering more slots than the coordinator takes is refused",
          "[coordinator][scheduler]") {
  SchedulerConfig config;
  config.max_worker_slots = 16;
  Scheduler scheduler(config);
  auto refused =
      scheduler.worker_joined(WorkerHello{WorkerId{"greedy"}, 4'000'000'000u, 0, {}}, at(0));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message ==
        "worker greedy offers 4000000000 slots; this coordinator takes at most 16 a worker (give "
        "a smaller --slots, or start the coordinator with a larger --max-worker-slots)");
  CHECK(scheduler.worker_joined(WorkerHello{WorkerId{"fair"}, 16, 0, {}}, at(0)));
  CHECK(SchedulerConfig{}.max_worker_slots == 1024);
}

constexpr pack::Executor kLua = pack::Executor::lua;
constexpr pack::Executor kPython = pack::Executor::activegraph;

TEST_CASE("a trial is leased only to a worker that offers its executor",
          "[coordinator][scheduler][executor]") {
  Logged s;
  s.submit(testing::job("mix", 0, 6, {1, 3, 4}), at(0));
  s.join("lua", 8, at(1));
  CHECK(names(s.work("lua", 8, at(2))) == Names{"mix#0", "mix#2", "mix#5"});
  CHECK(s.work("lua", 8, at(3)).empty());  // what is left needs activegraph
  JobStatus waiting = s.job("mix");
  CHECK(waiting.count(TrialStatus::queued) == 3);
  CHECK(waiting.queued_by_executor == std::array<std::uint64_t, 2>{0, 3});
  CHECK(s.scheduler.workers_offering(kLua) == 1);
  CHECK(s.scheduler.workers_offering(kPython) == 0);

  s.join("both", 8, at(4), {}, {kPython, kLua, kPython});
  CHECK(s.scheduler.workers_offering(kPython) == 1);
  CHECK(names(s.work("both", 8, at(5))) == Names{"mix#1", "mix#3", "mix#4"});
  CHECK(s.job("mix").queued_by_executor == std::array<std::uint64_t, 2>{0, 0});
  const auto both = s.scheduler.worker_status(WorkerId{"both"});
  REQUIRE(both);
  CHECK(both->executors == std::vector<pack::Executor>{kLua, kPython});  // once each, in order

  // A lost worker no longer counts, and what it held waits for another.
  s.keep(s.scheduler.worker_lost(WorkerId{"both"}, "gone", at(6)));
  CHECK(s.scheduler.workers_offering(kPython) == 0);
  CHECK(s.job("mix").queued_by_executor == std::array<std::uint64_t, 2>{0, 3});
  CHECK(s.work("lua", 8, at(7)).empty());
  CHECK(testing::replayed(s.log).state_text() == s.scheduler.state_text());
}

TEST_CASE("a worker offering several executors is served the jobs of both in turn",
          "[coordinator][scheduler][executor]") {
  Logged s;
  s.submit(testing::job("lua", 0, 3), at(0));
  s.submit(testing::job("py", 0, 3, {0, 1, 2}), at(1));
  s.submit(testing::job("urgent-py", 1, 1, {0}), at(2));
  s.join("both", 8, at(3), {}, {kLua, kPython});
  CHECK(names(s.work("both", 5, at(4))) == Names{"urgent-py#0", "lua#0", "py#0", "lua#1", "py#1"});
  // A Lua-only worker skips the activegraph job without taking its turn.
  s.submit(testing::job("py2", 0, 2, {0, 1}), at(5));
  s.join("lua-only", 4, at(6));
  CHECK(names(s.work("lua-only", 4, at(7))) == Names{"lua#2"});
  CHECK(names(s.work("both", 3, at(8))) == Names{"py#2", "py2#0", "py2#1"});
  CHECK(testing::replayed(s.log).state_text() == s.scheduler.state_text());
}

TEST_CASE("a worker that offers no executor is refused", "[coordinator][scheduler][executor]") {
  Scheduler scheduler;
  auto refused = scheduler.worker_joined(WorkerHello{WorkerId{"idle"}, 2, 0, {}, {}}, at(0));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message ==
        "worker idle offers no executor this coordinator knows (lua, activegraph); a worker "
        "offers lua whatever its --python");
}

TEST_CASE("a job's state follows its trials, and a finished job is not cancelled",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 2), at(0));
  CHECK(s.job("a").state() == "queued");
  s.join("w1", 2, at(1));
  s.work("w1", 2, at(2));
  CHECK(s.job("a").state() == "running");
  for (std::uint32_t i = 0; i < 2; ++i) {
    s.report("w1", trial("a", i), 1, at(3));
    s.reconcile(trial("a", i), at(4));
  }
  CHECK(s.job("a").state() == "finished");
  auto refused = s.scheduler.cancel(JobId{"a"}, at(5));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::conflict);
  CHECK(refused.error().message ==
        "job a has finished (every trial reconciled or abandoned): there is nothing to cancel, "
        "and its results stand");
  CHECK_FALSE(s.job("a").cancelled);

  s.submit(testing::job("b", 0, 3), at(6));
  s.keep(s.scheduler.cancel(JobId{"b"}, at(7)));
  CHECK(s.job("b").state() == "cancelled");
  CHECK(s.job("b").count(TrialStatus::cancelled) == 3);

  // A job whose trial ran out of attempts ends abandoned.
  SchedulerConfig once = kShortLeases;
  once.max_attempts = 1;
  Logged t(once);
  t.submit(testing::job("c", 0, 1), at(0));
  t.join("w1", 1, at(1));
  t.work("w1", 1, at(2));
  t.tick(at(20'000));
  CHECK(t.job("c").state() == "abandoned");
}

TEST_CASE("a late report of a superseded attempt is fenced and changes nothing else",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("slow", 1, at(0));
  s.join("fast", 1, at(0));
  REQUIRE(s.work("slow", 1, at(0)).size() == 1);
  s.tick(at(10'000));
  REQUIRE(s.work("fast", 1, at(10'001)).size() == 1);

  const ReportResult late = s.report("slow", trial("a", 0), 1, at(10'002));
  CHECK(late.verdict == ReportVerdict::fenced);
  CHECK(late.reason == "a#0 attempt 1 is superseded by attempt 2");
  const auto& fenced = only<TrialFenced>(late.records);
  CHECK(fenced.worker == WorkerId{"slow"});
  CHECK(fenced.attempt == 1);
  CHECK(s.job("a").fenced_reports == 1);
  const TrialState after = *s.scheduler.trial_state(trial("a", 0));
  CHECK(after.status == TrialStatus::leased);
  CHECK(after.attempt == 2);
  CHECK(after.worker == WorkerId{"fast"});
  CHECK(after.lease_expires == at(20'001));

  // The current attempt from another worker is fenced too.
  CHECK(s.report("slow", trial("a", 0), 2, at(10'003)).reason ==
        "a#0 attempt 2 is leased to fast, not to slow");
  CHECK(s.report("fast", trial("a", 0), 2, at(10'004)).verdict == ReportVerdict::accepted);
  CHECK(s.status(trial("a", 0)) == TrialStatus::reported);
}

TEST_CASE("a second report of an accepted attempt is a duplicate", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("w1", 1, at(0));
  REQUIRE(s.work("w1", 1, at(0)).size() == 1);
  CHECK(only<TrialReported>(s.report("w1", trial("a", 0), 1, at(1)).records).attempt == 1);
  const std::string reported = s.scheduler.state_text();
  const ReportResult again = s.report("w1", trial("a", 0), 1, at(2));
  CHECK(again.verdict == ReportVerdict::duplicate);
  CHECK(again.records.empty());
  CHECK(s.scheduler.state_text() == reported);

  s.reconcile(trial("a", 0), at(3), Outcome::scenario_failed);
  CHECK(s.report("w1", trial("a", 0), 1, at(4)).verdict == ReportVerdict::duplicate);
  CHECK(s.keep(*s.scheduler.reconciled(trial("a", 0), Outcome::completed, at(5))).empty());
  const JobStatus job = s.job("a");
  CHECK(job.count(TrialStatus::reconciled) == 1);
  CHECK(job.outcomes[static_cast<std::size_t>(Outcome::scenario_failed)] == 1);
  CHECK(job.finished());
}

TEST_CASE("a report of an attempt that was never leased is unknown", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 2), at(0));
  s.join("w1", 1, at(0));
  REQUIRE(s.work("w1", 1, at(0)).size() == 1);
  const auto unknown = [&](const TrialId& id, Attempt attempt) {
    const ReportResult result = s.report("w1", id, attempt, at(1));
    CHECK(result.records.empty());
    return result.verdict == ReportVerdict::unknown ? result.reason : "not unknown";
  };
  CHECK(unknown(trial("a", 2), 1) == "there is no trial a#2");
  CHECK(unknown(trial("b", 0), 1) == "there is no trial b#0");
  CHECK(unknown(trial("a", 0), 2) == "a#0 attempt 2 was never leased");
  CHECK(unknown(trial("a", 0), 0) == "a#0 attempt 0 was never leased");
  CHECK(unknown(trial("a", 1), 1) == "a#1 attempt 1 was never leased");
  CHECK(s.status(trial("a", 0)) == TrialStatus::leased);
}

TEST_CASE("a trial whose last attempt fails is abandoned with every attempt's reason",
          "[coordinator][scheduler]") {
  Logged s(kShortLeases);
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("w1", 1, at(0));
  REQUIRE(s.work("w1", 1, at(0)).size() == 1);
  s.tick(at(10'000));  // attempt 1: the lease lapses
  REQUIRE(s.work("w1", 1, at(10'000)).size() == 1);
  ReportResult failed =
      s.scheduler.attempt_failed(WorkerId{"w1"}, trial("a", 0), 2, "no disk", at(10'001));
  CHECK(failed.verdict == ReportVerdict::accepted);
  CHECK(only<TrialRequeued>(failed.records).reason == "worker w1 failed: no disk");
  REQUIRE(s.work("w1", 1, at(10'002)).size() == 1);
  REQUIRE(
      s.keep(s.scheduler.on_report(WorkerId{"w1"}, trial("a", 0), 3, at(10'003)).records).size() ==
      1);
  const Records last =
      s.keep(*s.scheduler.reconcile_failed(trial("a", 0), "head moved", at(10'004)));
  const auto& abandoned = only<TrialAbandoned>(last);
  CHECK(abandoned.attempt == 3);
  REQUIRE(abandoned.reasons.size() == 3);
  CHECK(abandoned.reasons[0].find("lease on worker w1 expired at ") == 0);
  CHECK(abandoned.reasons[1] == "worker w1 failed: no disk");
  CHECK(abandoned.reasons[2] == "reconciliation failed: head moved");
  CHECK(s.scheduler.trial_state(trial("a", 0))->reasons == abandoned.reasons);
  const JobStatus job = s.job("a");
  CHECK(job.count(TrialStatus::abandoned) == 1);
  CHECK(job.failed_attempts == 3);
  CHECK(job.finished());
  CHECK(s.report("w1", trial("a", 0), 3, at(10'005)).reason == "a#0 attempt 3 was abandoned");
  CHECK(s.work("w1", 1, at(10'006)).empty());
}

TEST_CASE("cancelling a job drops its queued trials and names its running ones",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 5), at(0));
  s.submit(testing::job("b", 0, 1), at(0));
  s.join("w1", 3, at(0));
  REQUIRE(s.work("w1", 3, at(1)).size() == 3);  // a#0, b#0, a#1
  REQUIRE(s.report("w1", trial("a", 1), 1, at(2)).verdict == ReportVerdict::accepted);
  const CancelResult cancelled = s.keep(s.scheduler.cancel(JobId{"a"}, at(3)));
  CHECK(cancelled.running == std::vector<RunningTrial>{{WorkerId{"w1"}, trial("a", 0), 1}});
  CHECK(only<JobCancelled>(cancelled.records).job == JobId{"a"});
  const JobStatus job = s.job("a");
  CHECK(job.cancelled);
  CHECK(job.count(TrialStatus::cancelled) == 4);
  CHECK(job.count(TrialStatus::reported) == 1);  // reconciliation goes on
  CHECK_FALSE(job.finished());
  CHECK(s.scheduler.queued_trials() == 0);
  CHECK(s.scheduler.worker_status(WorkerId{"w1"})->leases == 1);  // b#0

  CHECK(s.report("w1", trial("a", 0), 1, at(4)).reason == "a#0 attempt 1 was cancelled with job a");
  CHECK(s.heartbeat("w1", {{trial("a", 0), 1}, {trial("b", 0), 1}}, at(5)).stale ==
        std::vector<AttemptRef>{{trial("a", 0), 1}});
  s.reconcile(trial("a", 1), at(6));
  CHECK(s.job("a").finished());
  CHECK(s.keep(s.scheduler.cancel(JobId{"a"}, at(7))).records.empty());
  CHECK(s.work("w1", 3, at(8)).empty());
}

TEST_CASE("an archived job keeps its counts and forgets its trials", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 3), at(0));
  s.submit(testing::job("b", 0, 1), at(0));
  s.join("w1", 4, at(0));
  REQUIRE(s.work("w1", 4, at(1)).size() == 4);
  CHECK_FALSE(s.scheduler.job_to_archive().has_value());  // nothing has finished
  for (std::uint32_t i = 0; i < 3; ++i) {
    REQUIRE(s.report("w1", trial("a", i), 1, at(2)).verdict == ReportVerdict::accepted);
    s.reconcile(trial("a", i), at(3));
  }
  CHECK(s.scheduler.job_to_archive() == JobId{"a"});
  CHECK(s.scheduler.job_to_archive({JobId{"a"}}) == std::nullopt);  // skipped
  // Before: a has its trials; the caller writes them to the archive, then
  // the record.
  CHECK(s.scheduler.trial_input(trial("a", 1)) == testing::job("a", 0, 3).trials[1]);
  CHECK(s.scheduler.trial_state(trial("a", 1))->outcome == Outcome::completed);
  const JobStatus before = s.job("a");
  s.scheduler.replay(JobArchived{JobId{"a"}, at(4)});
  JobStatus after = s.job("a");
  CHECK(after.archived);
  after.archived = false;
  CHECK(after.counts == before.counts);
  CHECK(after.outcomes == before.outcomes);
  CHECK(after.trials == 3);
  CHECK(after.finished_at == before.finished_at);
  CHECK_FALSE(s.scheduler.job_to_archive().has_value());
  CHECK_FALSE(s.scheduler.trial_state(trial("a", 1)).has_value());
  CHECK_FALSE(s.scheduler.trial_input(trial("a", 1)).has_value());
  CHECK_FALSE(s.scheduler.visit_trials(JobId{"a"}, [](const TrialSummary&) {}));
  // A late report of its trial is fenced, and says why; the job's count of
  // fenced reports is all it changes. Of a trial it never had, it knows
  // nothing.
  const ReportResult late = s.report("w1", trial("a", 0), 1, at(5));
  CHECK(late.verdict == ReportVerdict::fenced);
  CHECK(late.reason == "a#0 attempt 1 came after job a finished: its results stand");
  CHECK(late.records.size() == 1);
  CHECK(s.job("a").fenced_reports == before.fenced_reports + 1);
  CHECK(s.job("a").counts == before.counts);
  CHECK(s.report("w1", trial("a", 3), 1, at(5)).verdict == ReportVerdict::unknown);
  // An unfinished job, or one archived already, is not archived: the log
  // would be corrupt.
  CHECK_THROWS_WITH(s.scheduler.replay(JobArchived{JobId{"b"}, at(6)}),
                    Catch::Contains("job b has not finished"));
  CHECK_THROWS_WITH(s.scheduler.replay(JobArchived{JobId{"a"}, at(6)}),
                    Catch::Contains("job a is archived"));
  // Its id stays taken.
  CHECK_FALSE(s.scheduler.submit(testing::job("a", 0, 1), at(7)).has_value());
}

TEST_CASE("a lost worker's leases are requeued", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 3), at(0));
  s.join("w1", 2, at(0));
  REQUIRE(s.work("w1", 2, at(1)).size() == 2);
  const Records lost = s.keep(s.scheduler.worker_lost(WorkerId{"w1"}, "connection closed", at(2)));
  REQUIRE(lost.size() == 3);
  CHECK(std::get<TrialRequeued>(lost[0]).reason == "worker w1 lost: connection closed");
  CHECK(std::get<WorkerLost>(lost[2]).reason == "connection closed");
  CHECK(s.scheduler.queued_trials() == 3);
  CHECK_FALSE(s.scheduler.worker_status(WorkerId{"w1"})->alive);
  CHECK(s.scheduler.request_work(WorkerId{"w1"}, 1, at(3)).error().code ==
        ErrorCode::failed_precondition);
  CHECK(s.scheduler.heartbeat(WorkerId{"w1"}, {}, at(3)).error().code ==
        ErrorCode::failed_precondition);
  CHECK(s.scheduler.worker_lost(WorkerId{"w1"}, "again", at(3)).empty());
  // It may join again, with a cache of its own.
  s.join("w1", 1, at(4), {digest(2)});
  CHECK(names(s.work("w1", 1, at(5))) == Names{"a#2"});
}

TEST_CASE("a worker unheard of past the timeout is lost", "[coordinator][scheduler]") {
  Logged s(SchedulerConfig{Duration{60'000}, Duration{5'000}, 3});
  s.submit(testing::job("a", 0, 2), at(0));
  s.join("quiet", 1, at(0));
  s.join("chatty", 1, at(0));
  REQUIRE(s.work("quiet", 1, at(0)).size() == 1);
  s.heartbeat("chatty", {}, at(4'000));
  const Records lost = s.tick(at(5'000));
  REQUIRE(lost.size() == 2);
  CHECK(std::get<TrialRequeued>(lost[0]).trial == trial("a", 0));
  CHECK(std::get<WorkerLost>(lost[1]).worker == WorkerId{"quiet"});
  CHECK(std::get<WorkerLost>(lost[1]).reason.find("not heard of since ") == 0);
  CHECK(s.scheduler.worker_status(WorkerId{"chatty"})->alive);
  CHECK(only<WorkerLost>(s.tick(at(9'000))).worker == WorkerId{"chatty"});
}

TEST_CASE("a worker that joins again under its id loses what it held", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 1), at(0));
  s.join("w1", 1, at(0));
  REQUIRE(s.work("w1", 1, at(1)).size() == 1);
  const Records joined =
      s.keep(s.scheduler.worker_joined(WorkerHello{WorkerId{"w1"}, 4, 0, {}}, at(2)));
  REQUIRE(joined.size() == 3);
  CHECK(std::holds_alternative<TrialRequeued>(joined[0]));
  CHECK(std::holds_alternative<WorkerLost>(joined[1]));
  CHECK(std::get<WorkerJoined>(joined[2]).slots == 4);
  CHECK(s.report("w1", trial("a", 0), 1, at(3)).verdict == ReportVerdict::fenced);
  const auto again = s.work("w1", 4, at(4));
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempt == 2);
}

TEST_CASE("inputs the state does not allow are refused without a change",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 1), at(0));
  const std::string before = s.scheduler.state_text();
  CHECK(s.scheduler.submit(testing::job("a", 0, 1), at(1)).error() ==
        Status{ErrorCode::conflict, "job a was submitted before"});
  CHECK(s.scheduler.submit(testing::job("", 0, 1), at(1)).error().code ==
        ErrorCode::invalid_argument);
  CHECK(s.scheduler.worker_joined(WorkerHello{WorkerId{"w"}, 0, 0, {}}, at(1)).error() ==
        Status{ErrorCode::invalid_argument, "worker w offers no slots"});
  CHECK(s.scheduler.worker_joined(WorkerHello{WorkerId{"w"}, 1, 1025, {}}, at(1)).error() ==
        Status{ErrorCode::invalid_argument,
               "worker w asks to prefetch 1025 assignments; at most 1024 (give a smaller "
               "--prefetch)"});
  CHECK(s.scheduler.request_work(WorkerId{"w"}, 1, at(1)).error().code ==
        ErrorCode::failed_precondition);
  CHECK(s.scheduler.cancel(JobId{"b"}, at(1)).error() == Status{ErrorCode::not_found, "no job b"});
  CHECK(s.scheduler.reconciled(trial("a", 0), Outcome::completed, at(1)).error() ==
        Status{ErrorCode::failed_precondition, "a#0 is queued, not reported"});
  CHECK(s.scheduler.reconciled(trial("a", 1), Outcome::completed, at(1)).error().code ==
        ErrorCode::not_found);
  CHECK(s.scheduler.reconcile_failed(trial("a", 0), "x", at(1)).error().code ==
        ErrorCode::failed_precondition);
  CHECK(s.scheduler.state_text() == before);
  CHECK(s.log.size() == 1);
}

TEST_CASE("a configuration that would disable leases or attempts is refused",
          "[coordinator][scheduler]") {
  const auto refused = [](SchedulerConfig config) {
    try {
      Scheduler s(config);
    } catch (const Error& error) {
      return error.code() == ErrorCode::invalid_argument;
    }
    return false;
  };
  CHECK(refused(SchedulerConfig{Duration{0}, Duration{1}, 1}));
  CHECK(refused(SchedulerConfig{Duration{1}, Duration{-1}, 1}));
  CHECK(refused(SchedulerConfig{Duration{1}, Duration{1}, 0}));
  CHECK_FALSE(refused(SchedulerConfig{Duration{1}, Duration{1}, 1}));
}

TEST_CASE("a job's status counts its trials by status", "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 3, 4), at(0));
  s.join("w1", 2, at(0));
  REQUIRE(s.work("w1", 2, at(1)).size() == 2);
  REQUIRE(s.report("w1", trial("a", 0), 1, at(2)).verdict == ReportVerdict::accepted);
  JobStatus job = s.job("a");
  CHECK(job.name == "job a");
  CHECK(job.priority == 3);
  CHECK(job.trials == 4);
  CHECK(job.counts == std::array<std::uint64_t, kTrialStatusCount>{2, 1, 1, 0, 0, 0});
  CHECK(job.done() == 0);
  s.reconcile(trial("a", 0), at(3));
  CHECK(s.job("a").done() == 1);
  CHECK(*s.scheduler.payload(trial("a", 3)) == "segment 3");
  CHECK(s.scheduler.payload(trial("a", 4)) == nullptr);
  CHECK(s.scheduler.jobs().size() == 1);
  CHECK(s.scheduler.workers().size() == 1);
  CHECK_FALSE(s.scheduler.job_status(JobId{"b"}));
}

TEST_CASE("a job is finished at the time of the record that ends its last trial",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 2), at(100));
  s.submit(testing::job("b", 0, 3), at(200));
  s.submit(testing::job("empty", 0, 0), at(300));
  CHECK(s.job("a").submitted_at == at(100));
  CHECK_FALSE(s.job("a").finished_at);
  CHECK(s.job("empty").finished_at == at(300));
  s.join("w1", 2, at(400));
  const auto leased = s.work("w1", 2, at(500));
  REQUIRE(names(leased) == std::vector<std::string>{"a#0", "b#0"});
  s.report("w1", trial("a", 0), 1, at(600));
  s.reconcile(trial("a", 0), at(700), Outcome::crashed);
  CHECK_FALSE(s.job("a").finished_at);
  // A job whose trials are cancelled is finished by the cancellation.
  s.keep(s.scheduler.cancel(JobId{"a"}, at(800)));
  CHECK(s.job("a").finished_at == at(800));
  s.report("w1", trial("b", 0), 1, at(900));
  s.reconcile(trial("b", 0), at(1'000));
  REQUIRE(s.work("w1", 2, at(1'100)).size() == 2);
  for (std::uint32_t i = 1; i < 3; ++i) {
    s.report("w1", trial("b", i), 1, at(1'200));
    s.reconcile(trial("b", i), at(1'300 + i), Outcome::scenario_failed);
  }
  CHECK(s.job("b").finished_at == at(1'302));
  // Replay finds the same times.
  const Scheduler again = testing::replayed(s.log);
  CHECK(again.job_status(JobId{"b"})->finished_at == at(1'302));
  CHECK(again.state_text() == s.scheduler.state_text());
}

TEST_CASE("a visit of a job's trials sees each one's status, outcome and payload in order",
          "[coordinator][scheduler]") {
  Logged s;
  s.submit(testing::job("a", 0, 3), at(0));
  s.join("w1", 1, at(0));
  s.work("w1", 1, at(1));
  s.report("w1", trial("a", 0), 1, at(2));
  s.reconcile(trial("a", 0), at(3), Outcome::limits_exceeded);
  s.work("w1", 1, at(4));
  std::vector<std::string> seen;
  CHECK(s.scheduler.visit_trials(JobId{"a"}, [&](const TrialSummary& t) {
    seen.push_back(std::to_string(t.index) + " " + std::string(trial_status_name(t.status)) + " " +
                   (t.outcome ? std::string(outcome_name(*t.outcome)) : "-") + " " + t.payload);
  }));
  CHECK(seen == std::vector<std::string>{"0 reconciled limits_exceeded segment 0",
                                         "1 leased - segment 1", "2 queued - segment 2"});
  CHECK_FALSE(s.scheduler.visit_trials(JobId{"nope"}, [](const TrialSummary&) { FAIL(); }));
}

}  // namespace
}  // namespace forktrial::coordinator

namespace forktrial::coordinator {

TEST_CASE("a queued trial never leased is answered from the cache, and only such a trial",
          "[coordinator][scheduler][cache]") {
  testing::Logged s;
  s.submit(testing::job("a", 0, 3), testing::at(0));
  s.join("w1", 1, testing::at(0));
  REQUIRE(s.work("w1", 1, testing::at(1)).size() == 1);  // a#0 leased
  const TrialId source = testing::trial("z", 4);

  const Records records = s.keep(
      s.scheduler.cached(testing::trial("a", 1), source, Outcome::completed, testing::at(2)));
  REQUIRE(records.size() == 1);
  CHECK(std::get<TrialCached>(records[0]) ==
        TrialCached{testing::trial("a", 1), 1, source, Outcome::completed, testing::at(2)});
  const auto state = s.scheduler.trial_state(testing::trial("a", 1));
  CHECK(state->status == TrialStatus::reconciled);
  CHECK(state->outcome == Outcome::completed);
  CHECK(state->cached_from == source);
  CHECK(!state->worker);
  const auto status = s.scheduler.job_status(JobId{"a"});
  CHECK(status->cached == 1);
  CHECK(status->count(TrialStatus::reconciled) == 1);
  CHECK(status->count(TrialStatus::queued) == 1);
  CHECK(s.scheduler.queued_trials() == 1);

  // Leased, answered already, or never submitted: refused, nothing changes.
  const std::string before = s.scheduler.state_text();
  for (const auto& [trial, code] :
       {std::pair{testing::trial("a", 0), ErrorCode::failed_precondition},
        std::pair{testing::trial("a", 1), ErrorCode::failed_precondition},
        std::pair{testing::trial("q", 0), ErrorCode::not_found},
        std::pair{testing::trial("a", 2), ErrorCode::invalid_argument}}) {
    const TrialId from = trial == testing::trial("a", 2) ? trial : source;
    const auto refused = s.scheduler.cached(trial, from, Outcome::completed, testing::at(3));
    REQUIRE(!refused);
    CHECK(refused.error().code == code);
  }
  CHECK(s.scheduler.state_text() == before);
  // The next offer is given the trial still queued, never the answered one.
  s.join("w2", 2, testing::at(4));
  const auto leased = s.work("w2", 2, testing::at(5));
  REQUIRE(leased.size() == 1);
  CHECK(leased[0].trial == testing::trial("a", 2));
  CHECK(testing::replayed(s.log).state_text() == s.scheduler.state_text());
}

}  // namespace forktrial::coordinator
