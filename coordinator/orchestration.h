// The coordinator's orchestration records: one value per state change of the
// scheduler (coordinator/scheduler.h), which the coordinator appends to the
// store's orchestration log, and which Scheduler::replay applies again to
// rebuild the scheduler's state after a restart.
//
// A record carries every value the change decided (a lease's expiry, the
// attempt a requeue leaves behind, the reasons of an abandoned trial), so
// applying it consults no configuration: a coordinator restarted with other
// settings rebuilds the same state, and only its later decisions follow the
// new settings. Each record names its event type in `kType`; the store keeps
// it as an event of that type.
//
// Plain values: copyable, comparable, safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "coordinator/ids.h"
#include "pack/executor.h"
#include "schema/outcome.h"

namespace forktrial::coordinator {

// A record Scheduler::replay (coordinator/scheduler.h) cannot apply to the state: its type and why.
class RecordDoesNotApply : public Error {
 public:
  RecordDoesNotApply(std::string_view type, const std::string& why)
      : Error(ErrorCode::internal,
              "orchestration record " + std::string(type) + " does not apply: " + why),
        type_(type),
        why_(why) {}
  const std::string& type() const { return type_; }
  const std::string& why() const { return why_; }

 private:
  std::string type_;
  std::string why_;
};

// One trial of a submission. The payload is the caller's (the serialized
// trial specification, in practice) and is never read here; the digests are
// the content the trial needs on a worker, which the scheduler matches
// against what workers hold.
struct TrialInput {
  std::string payload;
  Digest segment;
  std::vector<Digest> bundles;
  // The most one attempt may run once started (the trial's wall clock); 0:
  // no bound. With it, an attempt's lease has a deadline heartbeats cannot
  // move (Scheduler::request_work).
  Duration run_limit{0};
  // What runs its candidate: only a worker offering it is leased the trial.
  pack::Executor executor = pack::Executor::lua;
  // The digest of everything the trial depends on (coordinator/result_cache.h)
  // when its result may be cached and reused: a deterministic candidate, not
  // a repeat, caching not turned off. None: it always runs, and its result
  // is never reused.
  std::optional<Digest> cache_key{};
  friend bool operator==(const TrialInput&, const TrialInput&) = default;
};

enum class TrialStatus : std::uint8_t {
  queued,
  leased,
  reported,
  reconciled,
  cancelled,
  abandoned
};
inline constexpr std::size_t kTrialStatusCount = 6;
std::string_view trial_status_name(TrialStatus status);  // "queued", ...
std::optional<TrialStatus> parse_trial_status(std::string_view name);

// A (trial, attempt) pair, as workers list what they run.
struct AttemptRef {
  TrialId trial;
  Attempt attempt = 0;
  friend bool operator==(const AttemptRef&, const AttemptRef&) = default;
  friend auto operator<=>(const AttemptRef&, const AttemptRef&) = default;
};

// What is kept of a finished job's trials' forks (coordinator/retention.h
// applies it).
enum class KeepForks : std::uint8_t {
  all,       // keep every fork
  failures,  // keep the forks of trials whose outcome is not `completed`
  none,      // keep only the results
};
// "all", "failures", "none".
std::string_view keep_forks_name(KeepForks keep);
std::optional<KeepForks> parse_keep_forks(std::string_view name);

struct RetentionPolicy {
  KeepForks keep = KeepForks::all;
  // A job's forks are collected once it has been finished this long (a local
  // fork once it is this old).
  Duration after{0};
  friend bool operator==(const RetentionPolicy&, const RetentionPolicy&) = default;
};
// An age as people write one: a number and a unit, d (days), h, m, s or ms
// ("7d", "12h", "0"; a bare number is seconds). None for anything else, or
// a negative or absurd (past 100 years) age.
std::optional<Duration> parse_retention_age(std::string_view text);

// A job and all its trials were accepted; its trials are queued with
// attempt 1, their ids are (job, 0..n-1).
struct JobSubmitted {
  static constexpr std::string_view kType = "job.submitted";
  JobId job;
  int priority = 0;
  std::string name;
  std::vector<TrialInput> trials;
  Instant at;
  // The client key that submitted it (Z85), which alone, with the
  // administrators' keys, may cancel it and read it; "" without keys.
  std::string owner{};
  // The job's own retention; none: the policy gc is given.
  std::optional<RetentionPolicy> retention{};
  friend bool operator==(const JobSubmitted&, const JobSubmitted&) = default;
};

// The job was cancelled: its queued trials and its leased ones are
// cancelled; trials already reported go on to reconciliation.
struct JobCancelled {
  static constexpr std::string_view kType = "job.cancelled";
  JobId job;
  Instant at;
  friend bool operator==(const JobCancelled&, const JobCancelled&) = default;
};

// A worker joined (or joined again) with `slots` trial slots, room for
// `prefetch` more assignments waiting to start, a cache holding `cached`,
// and the executors it offers. It is last seen at `at`.
struct WorkerJoined {
  static constexpr std::string_view kType = "worker.joined";
  WorkerId worker;
  std::uint32_t slots = 0;
  std::uint32_t prefetch = 0;
  std::vector<Digest> cached;
  Instant at;
  std::vector<pack::Executor> executors{pack::Executor::lua};
  friend bool operator==(const WorkerJoined&, const WorkerJoined&) = default;
};

// The worker is gone. Its leases were ended by the records before this one
// (trial.requeued or trial.abandoned), so it holds none.
struct WorkerLost {
  static constexpr std::string_view kType = "worker.lost";
  WorkerId worker;
  std::string reason;
  Instant at;
  friend bool operator==(const WorkerLost&, const WorkerLost&) = default;
};

// The worker heartbeat at `at`; the leases in `renewed` now expire at
// `expires`. Applied in memory and never written: logs written before
// liveness left the log hold it, and replay it.
struct LeasesRenewed {
  static constexpr std::string_view kType = "worker.heartbeat";
  WorkerId worker;
  std::vector<AttemptRef> renewed;
  Instant expires;
  Instant at;
  friend bool operator==(const LeasesRenewed&, const LeasesRenewed&) = default;
};

// The trial's attempt `attempt` is leased to `worker` until `expires`.
struct TrialLeased {
  static constexpr std::string_view kType = "trial.leased";
  TrialId trial;
  Attempt attempt = 0;
  WorkerId worker;
  Instant expires;
  Instant at;
  // When the attempt ends whatever the heartbeats say (the epoch: never).
  Instant deadline{};
  friend bool operator==(const TrialLeased&, const TrialLeased&) = default;
};

// The attempt `attempt` failed for `reason` (its lease lapsed, its worker was
// lost or said it failed); the trial is queued again as attempt + 1.
struct TrialRequeued {
  static constexpr std::string_view kType = "trial.requeued";
  TrialId trial;
  Attempt attempt = 0;
  std::string reason;
  Instant at;
  friend bool operator==(const TrialRequeued&, const TrialRequeued&) = default;
};

// The last attempt failed too; `reasons` holds every attempt's reason, the
// first attempt's first.
struct TrialAbandoned {
  static constexpr std::string_view kType = "trial.abandoned";
  TrialId trial;
  Attempt attempt = 0;
  std::vector<std::string> reasons;
  Instant at;
  friend bool operator==(const TrialAbandoned&, const TrialAbandoned&) = default;
};

// The worker reported the attempt it holds the lease of; the lease ends and
// the caller reconciles the report in the store.
struct TrialReported {
  static constexpr std::string_view kType = "trial.reported";
  TrialId trial;
  Attempt attempt = 0;
  WorkerId worker;
  Instant at;
  friend bool operator==(const TrialReported&, const TrialReported&) = default;
};

// A report (or a failure) for an attempt that is not the live lease of the
// worker that sent it was refused. Nothing else changes; the job counts it.
struct TrialFenced {
  static constexpr std::string_view kType = "trial.fenced";
  TrialId trial;
  Attempt attempt = 0;
  WorkerId worker;
  std::string reason;
  Instant at;
  friend bool operator==(const TrialFenced&, const TrialFenced&) = default;
};

// The caller reconciled the reported attempt in the store; the trial is done.
struct TrialReconciled {
  static constexpr std::string_view kType = "trial.reconciled";
  TrialId trial;
  Attempt attempt = 0;
  Outcome outcome = Outcome::crashed;
  Instant at;
  friend bool operator==(const TrialReconciled&, const TrialReconciled&) = default;
};

// The queued trial was answered from the result cache: `source`, an earlier
// reconciled trial with the same cache key, gave its outcome, and the caller
// copied its result and fork for this trial in the transaction of this
// record. The trial is reconciled without being leased or run (its first
// attempt, `attempt`, was the cache's).
struct TrialCached {
  static constexpr std::string_view kType = "trial.cached";
  TrialId trial;
  Attempt attempt = 0;
  TrialId source;
  Outcome outcome = Outcome::completed;
  Instant at;
  friend bool operator==(const TrialCached&, const TrialCached&) = default;
};

// The finished job's trials were written to its archive run
// (coordinator/orchestration_log.h, archive_run_of), in the transaction of
// this record or before it: the scheduler keeps the job's counts and
// forgets its trials, which are read from the archive from then on.
struct JobArchived {
  static constexpr std::string_view kType = "job.archived";
  JobId job;
  Instant at;
  friend bool operator==(const JobArchived&, const JobArchived&) = default;
};

// ---- A snapshot (Scheduler::snapshot): the state written as records, which
// a fresh Scheduler applies to have that state again, without the history
// that made it (docs/decisions/0087-log-snapshots-and-compaction.md).
// Applied only to the state they were written for: each restores a job or a
// trial as the snapshot found it.

// An archived job, as its counts: what status, gc and the ranking read of
// it (its trials are in its archive run). The job is archived from then on.
struct JobSummary {
  static constexpr std::string_view kType = "job.summary";
  JobId job;
  int priority = 0;
  std::string name;
  std::string owner{};
  std::optional<RetentionPolicy> retention{};
  bool cancelled = false;
  std::uint64_t trials = 0;
  std::array<std::uint64_t, kTrialStatusCount> counts{};   // by TrialStatus
  std::array<std::uint64_t, kOutcomes.size()> outcomes{};  // by Outcome
  std::uint64_t failed_attempts = 0;
  std::uint64_t fenced_reports = 0;
  Instant submitted_at{};
  Instant finished_at{};
  Instant at;
  std::uint64_t cached = 0;  // trials answered from the result cache
  friend bool operator==(const JobSummary&, const JobSummary&) = default;
};

// A trial of a job the snapshot's job.submitted just restored, which has left
// its initial state (queued, attempt 1, never leased): its state as the
// snapshot found it. `worker` is the holder of its last lease (it joined
// earlier in the snapshot; a leased trial's is alive), `expires` and
// `deadline` its live lease's, `outcome` a reconciled trial's.
struct TrialRestored {
  static constexpr std::string_view kType = "trial.restored";
  TrialId trial;
  TrialStatus status = TrialStatus::queued;
  Attempt attempt = 1;
  Attempt leased_attempt = 0;
  std::optional<WorkerId> worker{};
  Instant expires{};
  Instant deadline{};
  std::vector<std::string> reasons{};
  std::optional<Outcome> outcome{};
  Instant at;
  friend bool operator==(const TrialRestored&, const TrialRestored&) = default;
};

// The end of a job's restoring (after its job.submitted and trial.restored
// records): what the job counts beyond its trials' states.
struct JobRestored {
  static constexpr std::string_view kType = "job.restored";
  JobId job;
  bool cancelled = false;
  std::uint64_t failed_attempts = 0;
  std::uint64_t fenced_reports = 0;
  std::optional<Instant> finished_at{};
  Instant at;
  friend bool operator==(const JobRestored&, const JobRestored&) = default;
};

using OrchestrationRecord =
    std::variant<JobSubmitted, JobCancelled, WorkerJoined, WorkerLost, LeasesRenewed, TrialLeased,
                 TrialRequeued, TrialAbandoned, TrialReported, TrialFenced, TrialReconciled,
                 JobArchived, TrialCached, JobSummary, TrialRestored, JobRestored>;

// The record's event type ("trial.leased", ...).
inline std::string_view record_type(const OrchestrationRecord& record) {
  return std::visit([](const auto& r) { return r.kType; }, record);
}

}  // namespace forktrial::coordinator
