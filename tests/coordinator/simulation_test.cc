// Many virtual workers against one scheduler in virtual time: workers join,
// die, come back, turn slow; reports arrive late, twice, or never; the
// coordinator itself restarts from its log. Whatever happens, every trial ends
// reconciled exactly once, or abandoned, or cancelled, never two of these.
//
// Deterministic: one seed gives one run. The random numbers come from
// std::mt19937_64, whose sequence the standard fixes, reduced with `%`, not
// through a distribution (whose results differ between libraries).
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "coordinator/scheduler.h"
#include "tests/coordinator/scheduler_support.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::digest;
using testing::replayed;

constexpr SchedulerConfig kConfig{Duration{5'000}, Duration{8'000}, 4};
constexpr std::int64_t kStep = 250;           // ms of virtual time per step
constexpr std::int64_t kChaosEnds = 300'000;  // then workers stay up and quick
constexpr std::int64_t kGiveUp = 2'000'000;

struct VirtualWorker {
  std::string id;
  std::uint32_t slots = 1;
  std::uint32_t prefetch = 0;  // assignments it holds beyond its slots
  bool up = false;
  bool slow = false;  // heartbeats too rarely to keep its leases
  std::int64_t next_heartbeat = 0;
  std::map<AttemptRef, std::int64_t> running;  // when each finishes
};

struct Message {
  std::int64_t due = 0;  // when it reaches the coordinator
  bool failure = false;
  std::string worker;
  AttemptRef attempt;
};

struct Reconciliation {
  std::int64_t due = 0;
  TrialId trial;
};

// Removes from `pending` and returns, in their order, the items due by `now`.
template <typename Item>
std::vector<Item> take_due(std::vector<Item>& pending, std::int64_t now) {
  std::vector<Item> due;
  std::erase_if(pending, [&](const Item& item) {
    if (item.due > now) return false;
    due.push_back(item);
    return true;
  });
  return due;
}

class Simulation {
 public:
  // With `snapshots`, finished jobs are archived as the coordinator
  // archives them, and a restart now and then compacts the log: the
  // scheduler is rebuilt from a snapshot of the replayed one, which must
  // answer every query alike, and the log goes on from that snapshot.
  explicit Simulation(std::uint64_t seed, bool snapshots = false)
      : rng_(seed), s_(kConfig), snapshots_(snapshots) {
    for (int i = 0; i < 20; ++i) {
      VirtualWorker& worker = workers_.emplace_back();
      worker.id = "w" + std::to_string(i);
      worker.slots = static_cast<std::uint32_t>(1 + roll(4));
      worker.prefetch = static_cast<std::uint32_t>(roll(3));
    }
  }

  void run() {
    std::int64_t now = 0;
    for (; now < kGiveUp; now += kStep) {
      submit_jobs(now);
      if (now < kChaosEnds) chaos(now);
      if (now == kChaosEnds) calm(now);
      for (VirtualWorker& worker : workers_) {
        if (worker.up) work(worker, now);
      }
      deliver(now);
      reconcile(now);
      s_.tick(at(now));
      if (snapshots_) archive(now);
      if (snapshots_ && now % 20'000 == 0) compact(now);
      check_counters();
      if (now > kChaosEnds && all_finished() && reconciliations_.empty()) break;
    }
    INFO("virtual time " << now << " ms");
    REQUIRE(all_finished());
  }

  // Each trial's end, checked against the log: reconciled once, or abandoned
  // or cancelled and never reconciled.
  void check_ends() {
    std::map<TrialId, int> reconciled;
    for (const OrchestrationRecord& record : s_.log) {
      if (const auto* done = std::get_if<TrialReconciled>(&record)) ++reconciled[done->trial];
      // Answered from the result cache: reconciled without a lease.
      if (const auto* done = std::get_if<TrialCached>(&record)) ++reconciled[done->trial];
    }
    std::map<TrialStatus, std::size_t> ends;
    for (const auto& [job, size] : submitted_) {
      for (std::uint32_t i = 0; i < size; ++i) {
        const TrialId id{JobId{job}, i};
        const auto archived = archived_.find(id);
        const TrialStatus status = archived != archived_.end() ? archived->second : s_.status(id);
        ++ends[status];
        INFO(id.str() << " is " << trial_status_name(status));
        CHECK(reconciled[id] == (status == TrialStatus::reconciled ? 1 : 0));
        CHECK((status == TrialStatus::reconciled || status == TrialStatus::abandoned ||
               status == TrialStatus::cancelled));
      }
    }
    // The seed's run met every hazard; a run that met none would prove little.
    CHECK(ends[TrialStatus::reconciled] > 0);
    CHECK(ends[TrialStatus::cancelled] > 0);
    CHECK(count<TrialFenced>() > 0);
    CHECK(count<TrialRequeued>() > 0);
    CHECK(count<WorkerLost>() > 0);
    CHECK(restarts_ > 0);
    CHECK(duplicates_ > 0);
    if (!snapshots_) {
      CHECK(replayed(s_.log).state_text() == s_.scheduler.state_text());
      return;
    }
    // The log as compacted and the whole history rebuild states that
    // answer as the live one.
    CHECK(compactions_ > 0);
    CHECK(archived_.size() > 0);
    CHECK(replayed(compacted_log(), kConfig).query_text() == s_.scheduler.query_text());
    CHECK(replayed(s_.log, kConfig).query_text() == s_.scheduler.query_text());
  }

 private:
  // The counters agree with each other: every trial has one status, and the
  // live workers hold every lease.
  void check_counters() const {
    std::uint64_t leased = 0;
    for (const JobStatus& job : s_.scheduler.jobs()) {
      std::uint64_t total = 0;
      for (const std::uint64_t count : job.counts) total += count;
      REQUIRE(total == job.trials);
      leased += job.count(TrialStatus::leased);
    }
    std::uint64_t held = 0;
    for (const WorkerStatus& worker : s_.scheduler.workers()) {
      REQUIRE((worker.alive || worker.leases == 0));
      REQUIRE(worker.leases <= worker.slots + worker.prefetch);
      held += worker.leases;
    }
    REQUIRE(held == leased);
  }

  std::uint64_t roll(std::uint64_t n) { return rng_() % n; }
  bool chance(std::uint64_t per_thousand) { return roll(1000) < per_thousand; }

  template <typename Record>
  std::size_t count() const {
    std::size_t n = 0;
    for (const OrchestrationRecord& record : s_.log) n += std::holds_alternative<Record>(record);
    return n;
  }

  void submit_jobs(std::int64_t now) {
    if (now % 40'000 != 0 || submitted_.size() == 6) return;
    const std::string id = "j" + std::to_string(submitted_.size());
    JobSubmission job{JobId{id}, static_cast<int>(roll(3)), id, {}};
    // The third job is large, and cancelled a second after it arrives.
    const bool doomed = submitted_.size() == 2;
    const std::size_t size = doomed ? 300 : 20 + roll(100);
    for (std::size_t i = 0; i < size; ++i) {
      job.trials.push_back(
          testing::trial_input(static_cast<int>(roll(30)), static_cast<int>(roll(3))));
    }
    submitted_.emplace_back(id, static_cast<std::uint32_t>(size));
    s_.submit(std::move(job), at(now));
    // With snapshots, some trials are answered from the result cache, as if
    // an earlier job's first trial had the same key.
    if (snapshots_ && submitted_.size() > 1) {
      const TrialId source{JobId{submitted_.front().first}, 0};
      for (std::uint32_t i = 0; i < size; ++i) {
        if (!chance(100)) continue;
        auto answered = s_.scheduler.cached(TrialId{JobId{id}, i}, source,
                                            kOutcomes[roll(kOutcomes.size())], at(now));
        REQUIRE(answered.has_value());
        s_.keep(std::move(*answered));
      }
    }
    if (doomed) {
      to_cancel_ = id;
      cancel_at_ = now + 1'000;
    }
  }

  void chaos(std::int64_t now) {
    if (now > 0 && chance(3)) restart(now);
    if (!to_cancel_.empty() && now >= cancel_at_) {
      const auto cancelled = s_.keep(s_.scheduler.cancel(JobId{to_cancel_}, at(now)));
      for (const RunningTrial& running : cancelled.running) {
        for (VirtualWorker& worker : workers_) {
          if (worker.id == running.worker.str())
            worker.running.erase({running.trial, running.attempt});
        }
      }
      to_cancel_.clear();
    }
    for (VirtualWorker& worker : workers_) {
      if (worker.up && chance(4)) {
        worker.up = false;
        worker.running.clear();
        if (chance(500)) s_.keep(s_.scheduler.worker_lost(WorkerId{worker.id}, "closed", at(now)));
      } else if (!worker.up && chance(30)) {
        join(worker, now);
      }
      if (chance(3)) worker.slow = !worker.slow;
    }
  }

  void calm(std::int64_t now) {
    for (VirtualWorker& worker : workers_) {
      worker.slow = false;
      if (!worker.up) join(worker, now);
    }
  }

  // The coordinator stops and starts again from its log; what it held only
  // in memory (reconciliations under way) is gone, and so are some messages
  // on their way to it.
  void restart(std::int64_t now) {
    ++restarts_;
    Scheduler rebuilt = replayed(compacted_log(), kConfig);
    if (snapshots_) {
      // Rebuilt from a snapshot, the state answers as the live one, not
      // with its internal numbering.
      REQUIRE(rebuilt.query_text() == s_.scheduler.query_text());
      REQUIRE(rebuilt.query_text() == replayed(s_.log, kConfig).query_text());
    } else {
      REQUIRE(rebuilt.state_text() == s_.scheduler.state_text());
    }
    s_.scheduler = std::move(rebuilt);
    reconciliations_.clear();
    std::erase_if(messages_, [this](const Message&) { return chance(500); });
    s_.keep(s_.scheduler.recover(at(now)));
  }

  // A worker (re)starts: a new incarnation, running nothing, with some of
  // the digests in its cache.
  void join(VirtualWorker& worker, std::int64_t now) {
    std::vector<Digest> cached;
    for (int i = 0; i < 30; ++i) {
      if (chance(200)) cached.push_back(digest(i));
    }
    worker.up = true;
    worker.running.clear();
    worker.next_heartbeat = now + 1'000;
    s_.keep(s_.scheduler.worker_joined(
        WorkerHello{WorkerId{worker.id}, worker.slots, worker.prefetch, cached}, at(now)));
  }

  void work(VirtualWorker& worker, std::int64_t now) {
    for (auto it = worker.running.begin(); it != worker.running.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      const bool failure = chance(80);
      const std::int64_t delay = static_cast<std::int64_t>(roll(worker.slow ? 8'000 : 2'000));
      messages_.push_back({now + delay, failure, worker.id, it->first});
      if (chance(100)) {
        messages_.push_back(
            {now + delay + static_cast<std::int64_t>(roll(5'000)), failure, worker.id, it->first});
      }
      it = worker.running.erase(it);
    }
    if (now >= worker.next_heartbeat) {
      std::vector<AttemptRef> running;
      for (const auto& [attempt, finish] : worker.running) running.push_back(attempt);
      auto beat = s_.scheduler.heartbeat(WorkerId{worker.id}, running, at(now));
      if (!beat) {
        join(worker, now);  // the coordinator lost it: start over
        return;
      }
      for (const AttemptRef& stale : beat->stale) worker.running.erase(stale);
      worker.next_heartbeat = now + (worker.slow ? 9'000 : 1'000);
    }
    const auto free_slots =
        static_cast<std::uint32_t>(worker.slots + worker.prefetch - worker.running.size());
    if (free_slots == 0) return;
    auto work = s_.scheduler.request_work(WorkerId{worker.id}, free_slots, at(now));
    if (!work) {
      join(worker, now);
      return;
    }
    s_.keep(work->records);
    for (const Assignment& assignment : work->assignments) {
      const auto length = static_cast<std::int64_t>(500 + roll(3'500));
      worker.running[{assignment.trial, assignment.attempt}] = now + length * (worker.slow ? 3 : 1);
    }
  }

  void deliver(std::int64_t now) {
    for (const Message& message : take_due(messages_, now)) {
      const WorkerId worker{message.worker};
      const ReportResult result =
          message.failure ? s_.scheduler.attempt_failed(worker, message.attempt.trial,
                                                        message.attempt.attempt, "crashed", at(now))
                          : s_.scheduler.on_report(worker, message.attempt.trial,
                                                   message.attempt.attempt, at(now));
      s_.keep(result.records);
      duplicates_ += result.verdict == ReportVerdict::duplicate;
      if (!message.failure && result.verdict == ReportVerdict::accepted) {
        reconciliations_.push_back(
            {now + static_cast<std::int64_t>(roll(1'000)), message.attempt.trial});
      }
    }
  }

  void reconcile(std::int64_t now) {
    for (const Reconciliation& r : take_due(reconciliations_, now)) {
      if (chance(30)) {
        s_.keep(s_.scheduler.reconcile_failed(r.trial, "head moved", at(now)));
      } else {
        s_.keep(s_.scheduler.reconciled(r.trial, kOutcomes[roll(kOutcomes.size())], at(now)));
      }
    }
  }

  // The log a restart reads: the last snapshot, then the records after it.
  std::vector<OrchestrationRecord> compacted_log() const {
    std::vector<OrchestrationRecord> log = snapshot_;
    log.insert(log.end(), s_.log.begin() + static_cast<std::ptrdiff_t>(since_snapshot_),
               s_.log.end());
    return log;
  }

  // The log is replaced by a snapshot of the state, which rebuilds a state
  // that answers alike, and whose own snapshot is the same.
  void compact(std::int64_t now) {
    ++compactions_;
    snapshot_ = s_.scheduler.snapshot(at(now));
    since_snapshot_ = s_.log.size();
    const Scheduler restored = replayed(snapshot_, kConfig);
    REQUIRE(restored.query_text() == s_.scheduler.query_text());
    REQUIRE(replayed(restored.snapshot(at(now)), kConfig).query_text() ==
            s_.scheduler.query_text());
  }

  // Each finished job is archived, as the coordinator archives them: its
  // trials' ends are kept here, and the scheduler keeps its counts.
  void archive(std::int64_t now) {
    while (const std::optional<JobId> job = s_.scheduler.job_to_archive()) {
      s_.scheduler.visit_trials(*job, [&](const TrialSummary& trial) {
        archived_[TrialId{*job, trial.index}] = trial.status;
      });
      const OrchestrationRecord archived = JobArchived{*job, at(now)};
      s_.scheduler.replay(archived);
      s_.log.push_back(archived);
    }
  }

  bool all_finished() const {
    for (const auto& [job, size] : submitted_) {
      if (!s_.job(job).finished()) return false;
    }
    return submitted_.size() == 6;
  }

  std::mt19937_64 rng_;
  testing::Logged s_;
  std::vector<VirtualWorker> workers_;
  std::vector<std::pair<std::string, std::uint32_t>> submitted_;
  std::string to_cancel_;
  std::int64_t cancel_at_ = 0;
  std::vector<Message> messages_;
  std::vector<Reconciliation> reconciliations_;
  int restarts_ = 0;
  std::size_t duplicates_ = 0;
  bool snapshots_ = false;
  int compactions_ = 0;
  std::vector<OrchestrationRecord> snapshot_;  // the last, if any
  std::size_t since_snapshot_ = 0;             // the records of s_.log before it
  std::map<TrialId, TrialStatus> archived_;    // the ends of archived jobs' trials
};

TEST_CASE("virtual workers that die, stall and repeat themselves finish every trial once",
          "[coordinator][simulation]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  INFO("seed " << seed);
  Simulation simulation(seed);
  simulation.run();
  simulation.check_ends();
}

TEST_CASE("a scheduler restored from snapshots of random histories answers as the replayed one",
          "[coordinator][simulation][snapshot]") {
  const std::uint64_t seed = GENERATE(range(1, 21));
  INFO("seed " << seed);
  Simulation simulation(static_cast<std::uint64_t>(seed), true);
  simulation.run();
  simulation.check_ends();
}

}  // namespace
}  // namespace forktrial::coordinator
