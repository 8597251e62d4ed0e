#include "worker/metrics.h"

#include <string>

#include "transport/metrics_endpoint.h"

namespace forktrial::worker {
namespace {

using transport::add_counter;
using transport::add_gauge;

}  // namespace

WorkerMetrics::WorkerMetrics()
    : trials_(*registry_,
              {"forktrial_worker_trials_total", "Trials this worker ran and reported, by outcome"},
              {"forktrial_worker_trial_duration_seconds",
               "Trials' time in their slot on this worker, by outcome"}),
      attempts_failed_(add_counter(*registry_, "forktrial_worker_attempts_failed_total",
                                   "Assignments this worker could not run (a blob not fetched, "
                                   "a pack not materialized); the coordinator retries them")),
      stopped_(add_counter(*registry_, "forktrial_worker_trials_stopped_total",
                           "Trials stopped because the coordinator asked (a cancelled job, a "
                           "superseded attempt)")),
      hits_(add_counter(*registry_, "forktrial_worker_cache_hits_total",
                        "Blobs an assignment needed that the cache held")),
      misses_(add_counter(*registry_, "forktrial_worker_cache_misses_total",
                          "Blobs an assignment needed that the cache lacked (fetched)")),
      evictions_(add_counter(*registry_, "forktrial_worker_cache_evictions_total",
                             "Blobs evicted from the cache to make room, least recently used "
                             "first")),
      corrupt_drops_(add_counter(*registry_, "forktrial_worker_cache_corrupt_drops_total",
                                 "Blobs dropped from the cache because their stored bytes no "
                                 "longer hashed to their digest")),
      blob_bytes_(add_counter(*registry_, "forktrial_worker_blob_bytes_received_total",
                              "Blob bytes fetched from the coordinator")),
      rejected_(*registry_, "forktrial_worker_messages_rejected_total",
                "Errors the coordinator answered this worker's messages with, by wire error code"),
      unreadable_(add_counter(*registry_, "forktrial_worker_messages_unreadable_total",
                              "Messages from the coordinator this worker could not read")),
      unsent_(add_counter(*registry_, "forktrial_worker_messages_unsent_total",
                          "Messages ZeroMQ would not queue for the coordinator (each is sent "
                          "again)")),
      slots_(add_gauge(*registry_, "forktrial_worker_slots", "This worker's trial slots")),
      slots_busy_(add_gauge(*registry_, "forktrial_worker_slots_busy",
                            "This worker's trial slots running a trial")),
      assignments_(add_gauge(*registry_, "forktrial_worker_assignments",
                             "Assignments held: running, fetching what they need, or waiting "
                             "for a slot")),
      cache_bytes_(
          add_gauge(*registry_, "forktrial_worker_cache_bytes", "Bytes of blobs the cache holds")),
      cache_capacity_(
          add_gauge(*registry_, "forktrial_worker_cache_capacity_bytes", "The cache's byte cap")),
      process_(*registry_) {}

void WorkerMetrics::observe(const WorkerGauges& now) {
  slots_.Set(static_cast<double>(now.slots));
  slots_busy_.Set(static_cast<double>(now.busy_slots));
  assignments_.Set(static_cast<double>(now.assignments));
  cache_bytes_.Set(static_cast<double>(now.cache_bytes));
  cache_capacity_.Set(static_cast<double>(now.cache_capacity));
  if (now.corrupt_drops > corrupt_drops_seen_) {
    corrupt_drops_.Increment(static_cast<double>(now.corrupt_drops - corrupt_drops_seen_));
    corrupt_drops_seen_ = now.corrupt_drops;
  }
  process_.observe(now.at);
}

}  // namespace forktrial::worker
