// The coordinator's metrics, in one prometheus-cpp registry that `--http`
// serves at /metrics (transport/metrics_endpoint.h). docs/cluster.md
// ("Metrics") lists them for operators; here is where each one comes from.
//
// Counters (since this process started; a restart begins them at 0):
//   forktrial_trials_reconciled_total{outcome}  reports reconciled in the store
//   forktrial_trials_cached_total               trials answered from the result cache
//                                               (trial.cached), never run: not reports
//   forktrial_trial_attempts_total              leases granted (trial.leased)
//   forktrial_trials_requeued_total             attempts failed, trial queued again
//   forktrial_trials_abandoned_total            last attempts failed
//   forktrial_lease_expiries_total              leases that lapsed at their expiry
//   forktrial_reports_fenced_total              reports refused as fenced
//   forktrial_jobs_submitted_total              jobs accepted
//   forktrial_workers_joined_total, forktrial_workers_lost_total
//   forktrial_messages_rejected_total{reason}   error replies, by error category
//   forktrial_replies_undelivered_total         replies ZeroMQ would not take
//   forktrial_blob_bytes_total{direction}       "uploaded" by clients, "served" to workers
//   forktrial_store_commits_total               write transactions committed to the store
//   forktrial_store_syncs_total                 forced flushes of the store to its disk
// Histograms:
//   forktrial_reconciliation_duration_seconds   report received -> reconciliation committed
//   forktrial_trial_duration_seconds{outcome}   the trial's time on its worker, as reported
// Gauges (the scheduler's state, so a restarted coordinator shows the
// replayed state at once):
//   forktrial_trials{status}                    trials of every job, by status
//   forktrial_job_queued_trials{job_id}         queued trials of each unfinished job (not
//                                               `job`, which Prometheus gives its targets)
//   forktrial_jobs{state}                       "active" (unfinished) and "finished" jobs
//   forktrial_workers_alive                     workers the coordinator holds alive
//   forktrial_cluster_slots                     their slots
//   forktrial_cluster_slots_busy                those of them holding a lease (at most
//                                               each worker's slots); two families, not
//                                               one labelled, so that sum() of either
//                                               counts each slot once
//   forktrial_store_full                        1 while the store takes no writes
// Gauges of the store's room (coordinator/store_disk.h) and of the process,
// read at most once a second (the server's monotonic clock says when):
//   forktrial_store_bytes                       the store's data file on disk
//   forktrial_store_map_bytes                   its LMDB map now (it doubles as needed)
//   forktrial_store_map_limit_bytes             the most the map grows to
//   forktrial_store_disk_free_bytes             free space of the disk holding the store
//                                               (kept at its last value while the disk
//                                               cannot tell)
//   forktrial_orchestration_log_records         records in the orchestration log (the
//                                               head of forktrial.orchestration)
//   process_start_time_seconds, process_resident_memory_bytes, process_open_fds
//                                               Prometheus's standard names
//                                               (transport/process_metrics.h)
// Info, set once: forktrial_build_info{version,wire_protocol,store_schema} 1,
// what `forktrial --version` prints.
//
// Counted when committed. A record counts once the store holds it, never when
// it is decided: a turn undone because the store was full (its records
// rebuilt from the log) counts nothing, and replaying the log at start counts
// nothing either (the gauges show what it rebuilt).
//
// Cost on the loop: updates are atomics or a short uncontended lock on
// metric objects whose references are taken once, in the constructor or when
// a job is first seen; no label is formatted per message. observe() costs
// O(unfinished jobs + live workers), and runs once per turn that changed
// something (measured at about 2 us with 10 jobs and 10 live workers, 15 us
// with 100 workers). observe_store() and observe_process() are called at most
// once a second: their readings (statvfs, a file's size, a snapshot's look at
// the log's head, a few /proc files) are made by the caller or rate-limited.
//
// Thread-safety: every member function but registry() is for the loop thread
// (the owner of the Scheduler). The registry is read by the HTTP server's
// threads while the loop updates it; prometheus-cpp makes that safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>

#include "coordinator/scheduler.h"
#include "coordinator/store_disk.h"
#include "schema/wire_codec.h"
#include "transport/metrics_endpoint.h"
#include "transport/process_metrics.h"

namespace forktrial::coordinator {

enum class BlobDirection : std::uint8_t { uploaded, served };

// Of the records Scheduler::tick returned, how many are lease expiries:
// tick loses silent workers first (each one's failed attempts, then its
// worker.lost), then lapses expired leases, so the failed attempts after the
// last worker.lost are the expiries.
std::size_t lease_expiries_in(const Records& tick);

class CoordinatorMetrics {
 public:
  CoordinatorMetrics();
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // What /metrics serves; shared with the HTTP server.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // The records of a commit that succeeded, in order.
  void committed(std::span<const OrchestrationRecord> records);
  // Records of Scheduler::tick, decided: their lease expiries count with
  // the next committed() (they are in that commit).
  void ticked(const Records& tick);
  // The decisions not yet committed were undone (the store is full).
  void undone();

  // A report of `outcome` reconciled: `latency` from its arrival to the
  // commit; `trial` its duration on the worker.
  void reconciled(Outcome outcome, std::chrono::steady_clock::duration latency,
                  std::chrono::milliseconds trial);
  void rejected(ErrorCode code) { rejected_.count(code); }
  void undelivered() { undelivered_.Increment(); }
  void blob_bytes(BlobDirection direction, std::uint64_t bytes);
  // The store's commits and forced flushes since it opened (they only grow).
  void store_writes(std::uint64_t commits, std::uint64_t syncs);

  // Sets the gauges from the scheduler. Jobs and workers it watches are the
  // ones committed() or resync() told of.
  void observe(const Scheduler& scheduler, bool store_full);
  // Sets the store's gauges; `log_records` nullopt leaves that one as it was
  // (the log could not be looked at).
  void observe_store(const StoreDisk& disk, std::optional<std::uint64_t> log_records);
  // Reads the process's gauges again unless it did less than a second
  // before `now` (the server's monotonic clock).
  void observe_process(std::chrono::steady_clock::time_point now) { process_.observe(now); }
  // Forgets what it watched and takes every unfinished job and live worker
  // from `scheduler`: after the log was replayed into it. Costs O(every job
  // and worker ever known).
  void resync(const Scheduler& scheduler);

 private:
  using Counts = std::array<std::uint64_t, kTrialStatusCount>;

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();

  transport::OutcomeSeries reconciled_;  // and each one's trial duration
  prometheus::Counter& attempts_;
  prometheus::Counter& requeued_;
  prometheus::Counter& cached_;
  prometheus::Counter& abandoned_;
  prometheus::Counter& lease_expiries_;
  prometheus::Counter& fenced_;
  prometheus::Counter& jobs_submitted_;
  prometheus::Counter& workers_joined_;
  prometheus::Counter& workers_lost_;
  transport::ErrorCodeCounters rejected_;
  prometheus::Counter& undelivered_;
  prometheus::Counter& store_commits_;
  prometheus::Counter& store_syncs_;
  std::array<prometheus::Counter*, 2> blob_bytes_{};  // by BlobDirection
  prometheus::Histogram& reconciliation_;

  std::array<prometheus::Gauge*, kTrialStatusCount> trials_{};
  prometheus::Family<prometheus::Gauge>& job_queued_;
  std::array<prometheus::Gauge*, 2> jobs_{};  // active, finished
  prometheus::Gauge& workers_alive_;
  prometheus::Gauge& slots_;
  prometheus::Gauge& slots_busy_;
  prometheus::Gauge& store_full_;
  prometheus::Gauge& store_bytes_;
  prometheus::Gauge& map_bytes_;
  prometheus::Gauge& map_limit_bytes_;
  prometheus::Gauge& disk_free_bytes_;
  prometheus::Gauge& log_records_;
  transport::ProcessMetrics process_;

  std::uint64_t expiries_decided_ = 0;  // by ticked(), not yet committed
  // Unfinished jobs, each with its queue gauge (null until observed); the
  // counts of finished ones, which no longer change, are summed once.
  std::map<JobId, prometheus::Gauge*> active_jobs_;
  Counts finished_counts_{};
  std::uint64_t finished_jobs_ = 0;
  std::set<WorkerId> alive_workers_;
};

}  // namespace forktrial::coordinator
