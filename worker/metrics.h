// A worker's metrics, in one prometheus-cpp registry that `--http` serves at
// /metrics (transport/metrics_endpoint.h). docs/cluster.md ("Metrics") lists
// them for operators; here is where each one comes from. Every name starts
// with forktrial_worker_, so a worker's series never mix with the
// coordinator's in one query.
//
// Counters (since this process started):
//   forktrial_worker_trials_total{outcome}          trials run and reported, by outcome
//   forktrial_worker_attempts_failed_total          assignments it could not run (a blob
//                                                   not fetched, a pack not materialized)
//   forktrial_worker_trials_stopped_total           trials stopped as the coordinator asked
//   forktrial_worker_cache_hits_total               blobs an assignment needed, held already
//   forktrial_worker_cache_misses_total             ... not held: fetched from the coordinator
//   forktrial_worker_cache_evictions_total          blobs evicted to make room
//   forktrial_worker_cache_corrupt_drops_total      blobs dropped because their bytes were damaged
//   forktrial_worker_blob_bytes_received_total      blob bytes fetched from the coordinator
//   forktrial_worker_messages_rejected_total{reason}  errors the coordinator answered, by code
//   forktrial_worker_messages_unreadable_total      coordinator messages it could not read
//   forktrial_worker_messages_unsent_total          messages ZeroMQ would not queue (sent again)
// Histogram:
//   forktrial_worker_trial_duration_seconds{outcome}  a trial's time in its slot
// Gauges:
//   forktrial_worker_slots                          its slots (--slots)
//   forktrial_worker_slots_busy                     those running a trial (two families, so
//                                                   that sum() counts each slot once)
//   forktrial_worker_assignments                    assignments held: running, fetching, waiting
//   forktrial_worker_cache_bytes                    bytes of blobs the cache holds
//   forktrial_worker_cache_capacity_bytes           its cap (--cache-bytes)
//   process_start_time_seconds, process_resident_memory_bytes, process_open_fds
//                                                   the worker process's own, under
//                                                   Prometheus's standard names, read at
//                                                   most once a second
//                                                   (transport/process_metrics.h)
//
// Cost: updates are atomics or a short uncontended lock on metric objects
// whose references are taken in the constructor.
//
// Thread-safety: every member function but registry() is for the worker's
// loop thread. The registry is read by the HTTP server's threads while the
// loop updates it; prometheus-cpp makes that safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

#include "schema/outcome.h"
#include "schema/wire_codec.h"
#include "transport/metrics_endpoint.h"
#include "transport/process_metrics.h"

namespace forktrial::worker {

// What the worker's loop reads off its state each turn, for the gauges.
struct WorkerGauges {
  std::uint64_t slots = 0;
  std::uint64_t busy_slots = 0;
  std::uint64_t assignments = 0;
  std::uint64_t cache_bytes = 0;
  std::uint64_t cache_capacity = 0;
  std::uint64_t corrupt_drops = 0;  // the cache's count since it was opened
  // When (the worker's monotonic clock): the process gauges are read again
  // once a second of it.
  std::chrono::steady_clock::time_point at;
};

class WorkerMetrics {
 public:
  WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // What /metrics serves; shared with the HTTP server.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // A trial ran to a verdict of `outcome`, in `took`; its report goes out.
  void trial_reported(Outcome outcome, std::chrono::steady_clock::duration took) {
    trials_.observe(outcome, took);
  }
  void attempt_failed() { attempts_failed_.Increment(); }
  void trial_stopped() { stopped_.Increment(); }
  // An assignment needs a blob the cache holds (hit) or must fetch (miss).
  void cache_lookup(bool hit) { (hit ? hits_ : misses_).Increment(); }
  void cache_evicted() { evictions_.Increment(); }
  void blob_bytes_received(std::uint64_t bytes) {
    blob_bytes_.Increment(static_cast<double>(bytes));
  }
  void rejected(ErrorCode code) { rejected_.count(code); }
  void unreadable() { unreadable_.Increment(); }
  void unsent() { unsent_.Increment(); }

  void observe(const WorkerGauges& now);

 private:
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();

  transport::OutcomeSeries trials_;  // and each one's duration
  prometheus::Counter& attempts_failed_;
  prometheus::Counter& stopped_;
  prometheus::Counter& hits_;
  prometheus::Counter& misses_;
  prometheus::Counter& evictions_;
  prometheus::Counter& corrupt_drops_;
  prometheus::Counter& blob_bytes_;
  transport::ErrorCodeCounters rejected_;
  prometheus::Counter& unreadable_;
  prometheus::Counter& unsent_;
  prometheus::Gauge& slots_;
  prometheus::Gauge& slots_busy_;
  prometheus::Gauge& assignments_;
  prometheus::Gauge& cache_bytes_;
  prometheus::Gauge& cache_capacity_;
  std::uint64_t corrupt_drops_seen_ = 0;
  transport::ProcessMetrics process_;
};

}  // namespace forktrial::worker
