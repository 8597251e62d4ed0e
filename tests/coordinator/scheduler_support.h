// Shared by the coordinator's tests: virtual time, digests made from small
// numbers, jobs of numbered trials, and a scheduler that keeps the log of
// every record it returned.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/digest.h"
#include "coordinator/scheduler.h"

namespace forktrial::coordinator::testing {

// `ms` milliseconds after a fixed start.
inline Instant at(std::int64_t ms) {
  return Instant{Duration{1'700'000'000'000 + ms}};
}

inline Digest digest(int n) {
  return Sha256::of("digest " + std::to_string(n));
}

// A trial needing segment `segment` and bundle `bundle`; its payload names
// both.
inline TrialInput trial_input(int segment, int bundle = 0) {
  return TrialInput{"segment " + std::to_string(segment), digest(segment), {digest(1000 + bundle)}};
}

// `n` trials, trial i on segment i; the trials whose index is in `python`
// are activegraph packs' (the others Lua packs').
inline JobSubmission job(const std::string& id, int priority, std::size_t n,
                         const std::vector<std::size_t>& python = {}) {
  JobSubmission submission{JobId{id}, priority, "job " + id, {}};
  for (std::size_t i = 0; i < n; ++i) {
    TrialInput& input = submission.trials.emplace_back(trial_input(static_cast<int>(i)));
    if (std::ranges::find(python, i) != python.end()) input.executor = pack::Executor::activegraph;
  }
  return submission;
}

inline TrialId trial(const std::string& job, std::uint32_t index) {
  return TrialId{JobId{job}, index};
}

// A scheduler whose inputs append what they return to `log`, and REQUIRE
// that they were not refused.
struct Logged {
  Scheduler scheduler;
  std::vector<OrchestrationRecord> log;

  explicit Logged(SchedulerConfig config = {}) : scheduler(config) {}

  const Records& keep(const Records& records) {
    log.insert(log.end(), records.begin(), records.end());
    return records;
  }
  template <typename T>
  T keep(std::expected<T, Status> result) {
    if (!result) FAIL(result.error().message);
    if constexpr (std::is_same_v<T, Records>) {
      keep(static_cast<const Records&>(*result));
    } else if constexpr (!std::is_same_v<T, HeartbeatResult>) {
      keep(static_cast<const Records&>(result->records));
    }
    return std::move(*result);
  }

  void submit(JobSubmission submission, Instant now) {
    keep(scheduler.submit(std::move(submission), now));
  }
  void join(const std::string& worker, std::uint32_t slots, Instant now,
            std::vector<Digest> cached = {},
            std::vector<pack::Executor> executors = {pack::Executor::lua}) {
    keep(scheduler.worker_joined(
        WorkerHello{WorkerId{worker}, slots, 0, std::move(cached), std::move(executors)}, now));
  }
  std::vector<Assignment> work(const std::string& worker, std::uint32_t slots, Instant now) {
    return keep(scheduler.request_work(WorkerId{worker}, slots, now)).assignments;
  }
  HeartbeatResult heartbeat(const std::string& worker, const std::vector<AttemptRef>& running,
                            Instant now) {
    return keep(scheduler.heartbeat(WorkerId{worker}, running, now));
  }
  ReportResult report(const std::string& worker, const TrialId& id, Attempt attempt, Instant now) {
    ReportResult result = scheduler.on_report(WorkerId{worker}, id, attempt, now);
    keep(result.records);
    return result;
  }
  void reconcile(const TrialId& id, Instant now, Outcome outcome = Outcome::completed) {
    keep(scheduler.reconciled(id, outcome, now));
  }
  Records tick(Instant now) { return keep(scheduler.tick(now)); }

  TrialStatus status(const TrialId& id) const { return scheduler.trial_state(id)->status; }
  JobStatus job(const std::string& id) const { return *scheduler.job_status(JobId{id}); }
};

// The trial ids of `assignments`, as "<job>#<index>".
inline std::vector<std::string> names(const std::vector<Assignment>& assignments) {
  std::vector<std::string> result;
  for (const Assignment& assignment : assignments) result.push_back(assignment.trial.str());
  return result;
}

// A scheduler rebuilt from `log` by replay.
inline Scheduler replayed(const std::vector<OrchestrationRecord>& log,
                          SchedulerConfig config = {}) {
  Scheduler scheduler(config);
  for (const OrchestrationRecord& record : log) scheduler.replay(record);
  return scheduler;
}

// The configuration busy_morning is written for: 10 s leases, workers lost
// after 20 s of silence, two attempts.
inline constexpr SchedulerConfig kMorningConfig{Duration{10'000}, Duration{20'000}, 2};

// Inputs that write every kind of record: priorities, leases, heartbeats, a
// lapsed lease, a fenced report, a worker failure, an abandoned trial, a lost
// worker, a cancelled job, a trial answered from the result cache.
inline void busy_morning(Logged& s) {
  s.submit(testing::job("a", 0, 6), at(0));
  s.submit(testing::job("b", 1, 3), at(0));
  s.submit(testing::job("c", 0, 4), at(0));
  s.join("w1", 2, at(0), {digest(2)});
  s.join("w2", 3, at(0));
  s.work("w1", 2, at(100));
  s.work("w2", 3, at(100));
  s.heartbeat("w1", {{trial("b", 0), 1}, {trial("b", 1), 1}}, at(5'000));
  s.report("w1", trial("b", 0), 1, at(6'000));
  s.reconcile(trial("b", 0), at(6'100), Outcome::completed);
  s.tick(at(10'100));  // w2's leases lapse
  s.work("w1", 2, at(10'200));
  s.report("w2", trial("b", 2), 1, at(10'300));  // fenced
  s.keep(
      s.scheduler.attempt_failed(WorkerId{"w1"}, trial("b", 1), 1, "no disk", at(10'400)).records);
  s.join("w3", 4, at(11'000));
  s.work("w3", 4, at(11'000));
  s.keep(s.scheduler.cancel(JobId{"c"}, at(12'000)));
  s.keep(s.scheduler.worker_lost(WorkerId{"w1"}, "connection closed", at(13'000)));
  s.heartbeat("w3", {}, at(14'000));
  s.tick(at(21'500));  // w3's leases lapse for the second time: abandoned
  s.work("w3", 4, at(21'600));
  // A job of Lua and activegraph packs' trials: the Lua-only worker leaves
  // the activegraph ones queued for the worker that offers both.
  s.submit(testing::job("d", 0, 4, {1, 2}), at(22'000));
  s.work("w3", 4, at(22'100));
  s.join("w4", 2, at(22'200), {}, {pack::Executor::lua, pack::Executor::activegraph});
  s.work("w4", 1, at(22'300));
  // A job whose first trial is answered from the result cache with b's
  // reconciled result; its second stays queued.
  s.submit(testing::job("e", 0, 2), at(22'350));
  s.keep(s.scheduler.cached(trial("e", 0), trial("b", 0), Outcome::completed, at(22'400)));
}

}  // namespace forktrial::coordinator::testing
