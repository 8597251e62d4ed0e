// The coordinator's scheduling core: which trial runs where, for how long its
// lease holds, and what a worker's report means. A deterministic state
// machine: no sockets, no threads, no clock, no store. The coordinator's loop
// feeds it inputs (a submission, a worker's hello, heartbeat, offer of slots
// or report, the passing of time) with the time they happen at, and carries
// out what it returns; a simulator drives it the same way with virtual
// workers and virtual time.
//
// States of a trial (TrialStatus):
//
//   queued ──lease──▶ leased ──report──▶ reported ──reconciled──▶ reconciled
//     ▲                 │ │                  │
//     └──── requeue ────┘ │ (lease lapsed,    │ (reconciliation failed)
//     ▲   (attempt + 1)   │  worker lost,     │
//     └───────────────────┼─ worker failed) ──┘
//                         ▼
//   abandoned: the attempt that failed was the last (SchedulerConfig::
//   max_attempts); cancelled: the job was cancelled while the trial was
//   queued or leased.
//   A queued trial never leased may go straight to reconciled, answered
//   from the result cache (`cached`, trial.cached: coordinator/
//   result_cache.h).
//
// Record, then apply. Every input decides what changes and writes each change
// as an orchestration record (coordinator/orchestration.h), then applies the
// record to the state through `apply`, the one function that changes state;
// `replay(record)` is that same function. The records an input returns are
// already applied, in the order returned. The caller appends them to the
// store's orchestration log (before it tells any peer about them: "state
// changes are events first"); a restarted coordinator replays the log into a
// fresh Scheduler and has the state the old one had when it wrote the last
// record (but liveness, below), then calls `recover` once. A
// record applies without the configuration: it carries what was decided.
// Liveness is not recorded: a heartbeat moves its worker's last contact and
// its leases' expiries in memory only, so a worker adds no record while it
// merely runs. A replayed state holds the expiries its leases were granted
// with; `recover` then renews every live lease and hears every live worker
// at the restart, as a heartbeat would. What the decisions that follow need
// (a lapse, a loss) is recorded as it is decided.
//
// Scheduling is pull: a worker offers free slots (request_work) and gets up to
// that many trials, only of the executors it offers (WorkerHello::executors:
// a Lua-only worker is never leased an activegraph pack's trial). Each job
// keeps a queue per executor, and each executor a round of the jobs with
// trials queued for it. Jobs are served by priority, higher first; among jobs of
// equal priority one trial each in turn (round-robin), so a large job cannot
// starve a small one; a worker offering several executors is served the job
// whose turn came first in their rounds. Within the job whose turn it is, the trial whose
// digests (segment and bundles) the worker holds most of is preferred: the
// digests of its hello and of every trial it has been leased since. The
// preference looks at the job's oldest queued trial and at most
// kAffinityProbes cached digests, so an assignment costs O(log n) in the
// queued trials whatever the size of the queue and of the worker's cache.
//
// A report is judged by its (trial, attempt) and the worker that sent it
// (ReportVerdict). Only the live lease's holder is accepted; a superseded
// attempt, a trial no longer leased to the sender, or a cancelled or
// abandoned trial is fenced (and recorded, nothing else changes); a second
// report of an accepted attempt is a duplicate (acknowledged, no change); an
// attempt that was never leased is unknown.
//
// A finished job is archived by the caller: it writes the job's trials to
// the store (coordinator/orchestration_log.h, archive_run_of), then applies a
// job.archived record, after which the scheduler keeps the job's counts and
// forgets its trials (job_to_archive names the next; trial queries then
// answer as for an unknown trial, and a late report is unknown).
//
// Queries read counters kept as the state changes: a job's status costs a map
// look-up, whatever its size.
//
// Not thread-safe: a Scheduler has one owner, the coordinator's loop thread,
// which makes every call. References and pointers returned by queries are
// valid until the next input or replay.
//
// Errors. What a peer or a user may get wrong (an unknown worker offering
// slots, a job id already taken, a report for a trial that does not exist) is
// a value: a Status or a ReportVerdict. A record that replay cannot apply to
// the state (a lease of a trial that is not queued, a record of an unknown
// job) means the log and the state disagree, a corruption (a second writer
// of the log, say): replay throws RecordDoesNotApply (an Error, internal),
// naming the record and the state it found, and the Scheduler must be
// discarded; replay_setting_aside (coordinator/orchestration_log.h) replays a log
// again without such records.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "coordinator/ids.h"
#include "coordinator/orchestration.h"
#include "schema/outcome.h"

namespace forktrial::coordinator {

// Decisions only: applying a record never reads these, so a coordinator may
// restart with other values.
struct SchedulerConfig {
  Duration lease_duration{30'000};  // a lease's life from its grant or last renewal
  Duration worker_timeout{30'000};  // a worker unheard of for this long is lost
  Attempt max_attempts = 3;         // attempts of a trial before it is abandoned
  // The most slots a worker may offer: a worker claiming more is refused,
  // so that no worker can be leased the whole queue.
  std::uint32_t max_worker_slots = 1024;
};

// What the caller does with a report (or a failure) of an attempt.
enum class ReportVerdict : std::uint8_t {
  accepted,   // reconcile it (a failure: the trial was requeued or abandoned)
  fenced,     // refuse it: superseded attempt, not this worker's, or job cancelled
  duplicate,  // acknowledge it; it was accepted before and changes nothing
  unknown,    // refuse it: that attempt of that trial was never leased
};
std::string_view report_verdict_name(ReportVerdict verdict);

// A refusal (base/error.h) names the job, trial, worker and state involved.
using forktrial::Status;

using Records = std::vector<OrchestrationRecord>;

struct JobSubmission {
  JobId id;
  int priority = 0;
  std::string name;
  std::vector<TrialInput> trials;
  std::string owner{};                         // the submitting client's key; "" without keys
  std::optional<RetentionPolicy> retention{};  // none: gc's
};

struct WorkerHello {
  WorkerId id;
  std::uint32_t slots = 0;
  std::uint32_t prefetch = 0;  // assignments held beyond its slots
  std::vector<Digest> cached;
  // What it can run: it is leased only trials whose executor it offers.
  std::vector<pack::Executor> executors{pack::Executor::lua};
};

struct Assignment {
  TrialId trial;
  Attempt attempt = 0;
  Instant expires;
};

struct WorkResult {
  std::vector<Assignment> assignments;
  Records records;
};

struct HeartbeatResult {
  // Entries of the running set that are not the sender's live leases (a
  // superseded attempt, a cancelled job): the worker should stop them.
  std::vector<AttemptRef> stale;
};

struct ReportResult {
  ReportVerdict verdict = ReportVerdict::unknown;
  std::string reason;  // why, for fenced and unknown
  Records records;
};

struct RunningTrial {
  WorkerId worker;
  TrialId trial;
  Attempt attempt = 0;
  friend bool operator==(const RunningTrial&, const RunningTrial&) = default;
};

struct CancelResult {
  std::vector<RunningTrial> running;  // to be killed; their reports will be fenced
  Records records;
};

struct JobStatus {
  JobId id;
  std::string name;
  int priority = 0;
  bool cancelled = false;
  std::uint64_t trials = 0;
  std::array<std::uint64_t, kTrialStatusCount> counts{};   // by TrialStatus
  std::array<std::uint64_t, kOutcomes.size()> outcomes{};  // of reconciled trials, by Outcome
  std::uint64_t failed_attempts = 0;                       // requeues and abandonments
  std::uint64_t fenced_reports = 0;
  Instant submitted_at{};
  std::optional<Instant> finished_at;          // the time of the record that finished it
  std::string owner{};                         // the submitting client's key; "" without keys
  std::optional<RetentionPolicy> retention{};  // its own, as submitted
  // Finished, and its trials are in its archive (JobArchived): the
  // scheduler has its counts only.
  bool archived = false;
  // Its queued trials by the executor that runs them (pack::kExecutors'
  // order): with Scheduler::workers_offering, why a job waits.
  std::array<std::uint64_t, pack::kExecutorCount> queued_by_executor{};
  // Of its reconciled trials, those answered from the result cache
  // (TrialCached) rather than run.
  std::uint64_t cached = 0;

  std::uint64_t count(TrialStatus status) const { return counts[static_cast<std::size_t>(status)]; }
  // Trials that reached a final status (reconciled, cancelled, abandoned).
  std::uint64_t done() const;
  // No trial is queued, leased or reported.
  bool finished() const { return done() == trials; }
  // "queued" (no trial started yet), "running", "finished" (every trial
  // reconciled), "abandoned" (finished, some trials abandoned after their
  // last attempt) or "cancelled".
  std::string_view state() const;
};

struct WorkerStatus {
  WorkerId id;
  bool alive = false;
  std::uint32_t slots = 0;
  std::uint32_t prefetch = 0;
  // Its live leases: the trials it runs and the assignments it holds
  // prefetched beyond its slots (at most `prefetch` of them), ready for a
  // slot that frees.
  std::uint32_t leases = 0;
  Instant last_seen;
  std::size_t cached_digests = 0;
  std::vector<pack::Executor> executors{};

  // Of its leases, as many as its slots are counted running and the rest
  // prefetched: a worker runs at most `slots` trials at once and starts a
  // prefetched one as a slot frees. The coordinator does not hear which
  // lease a worker has started, so `running` is an upper bound, never more
  // than the slots.
  std::uint32_t running() const { return std::min(leases, slots); }
  std::uint32_t prefetched() const { return leases - running(); }
};

// A trial as a visit of its job sees it (Scheduler::visit_trials).
struct TrialSummary {
  std::uint32_t index = 0;
  TrialStatus status = TrialStatus::queued;
  std::optional<Outcome> outcome;  // once reconciled
  const std::string& payload;      // as submitted
};

struct TrialState {
  TrialId id;
  TrialStatus status = TrialStatus::queued;
  Attempt attempt = 1;                   // the live or next attempt
  std::optional<WorkerId> worker;        // the holder of the last lease
  std::optional<Instant> lease_expires;  // while leased
  std::vector<std::string> reasons;      // of each failed attempt, the first's first
  std::optional<Outcome> outcome;        // once reconciled
  std::optional<TrialId> cached_from;    // answered from the cache: whose result it reused
};

class Scheduler {
 public:
  // How many cached digests of a worker one assignment looks up at most.
  static constexpr std::size_t kAffinityProbes = 64;
  // The most assignments a worker may hold waiting beyond its slots: room to
  // hide a round trip, not to hoard a job.
  static constexpr std::uint32_t kMaxPrefetch = 1024;

  // Throws forktrial::Error (invalid_argument) for a configuration with a
  // duration or max_attempts that is not positive.
  explicit Scheduler(SchedulerConfig config = {});
  ~Scheduler();
  Scheduler(Scheduler&&) noexcept;
  Scheduler& operator=(Scheduler&&) noexcept;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues every trial of the job (job.submitted). Refused: an empty or
  // taken job id (conflict), more trials than a job may hold.
  std::expected<Records, Status> submit(JobSubmission job, Instant now);

  // Cancels the job (job.cancelled): queued and leased trials become
  // cancelled; `running` lists the leased ones, to be killed. Cancelling a
  // cancelled job changes nothing. Refused: an unknown job (not_found), a
  // job that has finished (conflict: its results stand). Costs O(trials
  // of the job), the one input that visits a whole job.
  std::expected<CancelResult, Status> cancel(const JobId& job, Instant now);

  // A worker's hello (worker.joined). A worker that joins under the id of a
  // live one is a new incarnation: the old one is lost first, and its leases
  // requeued. Refused: an empty id, zero slots, more slots than
  // max_worker_slots, a prefetch past kMaxPrefetch.
  std::expected<Records, Status> worker_joined(WorkerHello hello, Instant now);

  // The worker's running set: renews those that are its live leases and
  // hears the worker (in memory: no record), returns the others as stale. A
  // lease the worker does not list is left to run out (its assignment may
  // still be on the way).
  // Refused: a worker that is unknown or lost (it should join again).
  std::expected<HeartbeatResult, Status> heartbeat(const WorkerId& worker,
                                                   std::span<const AttemptRef> running,
                                                   Instant now);

  // The worker is gone (a closed connection): its leases lapse now, each
  // requeued or abandoned, then worker.lost. A worker unknown or already lost
  // changes nothing.
  Records worker_lost(const WorkerId& worker, const std::string& reason, Instant now);

  // Up to min(free_slots, room it has left: slots + prefetch - its leases) assignments
  // (trial.leased each). Refused: a worker that is unknown or lost.
  //
  // A trial with a run limit (its wall clock) gets a deadline heartbeats
  // cannot move: the lease to start it, the run limit for each trial queued
  // before it on the worker beyond its slots and for itself, and a lease to
  // report. A worker that holds a trial without running it (a compromised
  // one keeping leases alive with heartbeats) loses it then.
  std::expected<WorkResult, Status> request_work(const WorkerId& worker, std::uint32_t free_slots,
                                                 Instant now);

  // The passing of time: workers silent for worker_timeout are lost, then
  // leases whose expiry is at or before `now` lapse (trial.requeued, or
  // trial.abandoned after the last attempt).
  Records tick(Instant now);

  // A worker's report of an attempt. accepted: trial.reported, the caller
  // reconciles it in the store and then calls `reconciled`; fenced:
  // trial.fenced; duplicate and unknown: no records.
  ReportResult on_report(const WorkerId& worker, const TrialId& trial, Attempt attempt,
                         Instant now);

  // The worker could not run the attempt (it could not materialize the trial,
  // say): judged as a report is, and if accepted the trial is requeued or
  // abandoned with `reason`, as for a lapsed lease.
  ReportResult attempt_failed(const WorkerId& worker, const TrialId& trial, Attempt attempt,
                              const std::string& reason, Instant now);

  // The caller reconciled the reported attempt in the store
  // (trial.reconciled). Reconciling a reconciled trial changes nothing.
  // Refused: an unknown trial, a trial that is not reported.
  std::expected<Records, Status> reconciled(const TrialId& trial, Outcome outcome, Instant now);

  // The queued trial, never leased, is answered from the result cache with
  // `source`'s outcome (trial.cached): reconciled without running. The
  // caller has copied `source`'s result and fork for it, and writes them in
  // the transaction of the record. Refused: an unknown trial (not_found), a
  // trial not queued or leased before (failed_precondition: it runs), a
  // trial that would be its own source (invalid_argument).
  std::expected<Records, Status> cached(const TrialId& trial, const TrialId& source,
                                        Outcome outcome, Instant now);
  // The record `cached` would write and apply, decided without changing
  // anything: for a caller that writes it in a transaction of its own (with
  // the copies it stands for) and then replays it. Refused as `cached` is.
  std::expected<TrialCached, Status> cache_answer(const TrialId& trial, const TrialId& source,
                                                  Outcome outcome, Instant now) const;

  // The store refused the reported attempt's reconciliation: requeued or
  // abandoned with `reason`. Refused: an unknown trial, a trial not reported.
  std::expected<Records, Status> reconcile_failed(const TrialId& trial, const std::string& reason,
                                                  Instant now);

  // Applies one record of a log this class wrote, as the input that wrote it
  // did. Throws forktrial::Error (internal) when it does not apply to the
  // state. Given the record to keep, a job's payloads move into the state.
  void replay(const OrchestrationRecord& record);
  void replay(OrchestrationRecord&& record);

  // The state as records (a snapshot: coordinator/orchestration.h), stamped
  // `at`, which replayed into a fresh Scheduler give a state equal to this
  // one in all a query answers, but for liveness (as a replay of the log
  // does) and the lost workers no trial names, which are dropped: its size
  // is the live state's (unarchived jobs' trials, live workers, a summary
  // per archived job), not the history's. A job's rotation in its rounds
  // starts again in the order of submission. Costs O(state); the payloads
  // are copied.
  Records snapshot(Instant at) const;

  // Called once after the last record is replayed, before any other input.
  // The time the coordinator was down counts against no one: every live
  // worker's leases are renewed and it is heard of now (in memory, as a
  // heartbeat: the records returned are the failed attempts below).
  // A reported trial was being reconciled when the coordinator stopped, and
  // its reconciliation, one store transaction with trial.reconciled, did not
  // commit: the report is gone, and the attempt fails (requeued or abandoned);
  // the worker's report, if it sends it again, is fenced.
  Records recover(Instant now);

  // Queries.
  std::optional<JobStatus> job_status(const JobId& job) const;
  std::vector<JobStatus> jobs() const;  // by id
  std::optional<WorkerStatus> worker_status(const WorkerId& worker) const;
  std::vector<WorkerStatus> workers() const;  // by id, the lost ones too
  std::optional<TrialState> trial_state(const TrialId& trial) const;
  // Calls `visit` for every trial of the job, in index order; false for an
  // unknown job or an archived one (its trials are in its archive). Costs
  // O(trials of the job) and allocates nothing.
  bool visit_trials(const JobId& job, const std::function<void(const TrialSummary&)>& visit) const;
  // The trial's payload as submitted; nullptr for an unknown trial.
  const std::string* payload(const TrialId& trial) const;
  // The digest of the trial's segment (the parent's history up to its fork
  // point), as submitted; none for an unknown trial.
  std::optional<Digest> segment(const TrialId& trial) const;
  std::size_t queued_trials() const;  // of every job
  // The bytes of the trials' payloads the jobs not yet archived hold (a
  // payload several trials of a job share, once), of every job or of those
  // `owner` submitted.
  std::uint64_t held_payload_bytes() const;
  std::uint64_t held_payload_bytes(std::string_view owner) const;
  // Live workers that offer the executor.
  std::size_t workers_offering(pack::Executor executor) const;
  // Whether a trial is queued that the worker, alive, could be leased.
  bool has_work_for(const WorkerId& worker) const;
  // What runs the trial's candidate; none for an unknown trial.
  std::optional<pack::Executor> executor(const TrialId& trial) const;
  // The trial as submitted; none for an unknown or archived trial.
  std::optional<TrialInput> trial_input(const TrialId& trial) const;
  // The trial's result cache key as submitted (TrialInput::cache_key); none
  // for a trial without one, an unknown or an archived trial.
  std::optional<Digest> cache_key(const TrialId& trial) const;
  // A job that has finished and is not archived yet (the first of them by
  // submission) and not in `skip`, to be archived by the caller; none when
  // there is none.
  std::optional<JobId> job_to_archive(const std::set<JobId>& skip = {}) const;

  // Every durable value of the state, one line each, in a fixed order: equal
  // texts mean equal states but for liveness (lease expiries and workers'
  // last contact, which heartbeats move without a record), so a replayed
  // state's text equals the live one's (the replay tests compare them).
  // Costs O(state).
  std::string state_text() const;

  // What the queries answer, one line each: every job's status, every trial
  // of the jobs not archived (state and input), the live workers, what
  // waits. Not liveness, nor internal numbering (digests, turns), nor lost
  // workers: a state restored from a snapshot (`snapshot`) has the text of
  // the state the snapshot was taken of, as a replayed one has its
  // state_text. Costs O(state).
  std::string query_text() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace forktrial::coordinator
