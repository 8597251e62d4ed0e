#include "coordinator/metrics.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <variant>

#include "store/event_store.h"
#include "transport/metrics_endpoint.h"

namespace forktrial::coordinator {
namespace {

using prometheus::Histogram;
using transport::add_counter;
using transport::add_gauge;
using transport::add_histogram;

// Reconciliation: a commit shared by a turn's reports takes milliseconds;
// seconds mean the store or the loop is in trouble.
const Histogram::BucketBoundaries kReconciliationBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

bool failed_attempt(const OrchestrationRecord& record) {
  return std::holds_alternative<TrialRequeued>(record) ||
         std::holds_alternative<TrialAbandoned>(record);
}

}  // namespace

std::size_t lease_expiries_in(const Records& tick) {
  const auto last_lost = std::find_if(tick.rbegin(), tick.rend(), [](const auto& record) {
    return std::holds_alternative<WorkerLost>(record);
  });
  return static_cast<std::size_t>(std::count_if(tick.rbegin(), last_lost, failed_attempt));
}

CoordinatorMetrics::CoordinatorMetrics()
    : reconciled_(*registry_,
                  {"forktrial_trials_reconciled_total",
                   "Trial reports reconciled in the store, by outcome"},
                  {"forktrial_trial_duration_seconds",
                   "Reconciled trials' time on their worker, by outcome"}),
      attempts_(add_counter(*registry_, "forktrial_trial_attempts_total",
                            "Attempts leased to workers (a trial's first lease and every retry)")),
      requeued_(add_counter(*registry_, "forktrial_trials_requeued_total",
                            "Attempts that failed (lease lapsed, worker lost or failed, "
                            "reconciliation refused) and left their trial queued again")),
      cached_(add_counter(*registry_, "forktrial_trials_cached_total",
                          "Trials answered from the result cache: reconciled from an earlier "
                          "trial's recorded result and fork, without running")),
      abandoned_(add_counter(*registry_, "forktrial_trials_abandoned_total",
                             "Trials abandoned: their last attempt failed")),
      lease_expiries_(add_counter(*registry_, "forktrial_lease_expiries_total",
                                  "Leases that lapsed at their expiry (their worker alive, "
                                  "but silent about the trial)")),
      fenced_(add_counter(*registry_, "forktrial_reports_fenced_total",
                          "Reports refused as fenced: a superseded attempt, another worker's "
                          "lease, a cancelled or abandoned trial")),
      jobs_submitted_(add_counter(*registry_, "forktrial_jobs_submitted_total", "Jobs accepted")),
      workers_joined_(add_counter(*registry_, "forktrial_workers_joined_total",
                                  "Workers that joined (a new incarnation each)")),
      workers_lost_(add_counter(*registry_, "forktrial_workers_lost_total",
                                "Workers lost: unheard of for the worker timeout, or replaced by a "
                                "new incarnation")),
      rejected_(*registry_, "forktrial_messages_rejected_total",
                "Messages answered with an error, by its wire error code"),
      undelivered_(add_counter(*registry_, "forktrial_replies_undelivered_total",
                               "Replies ZeroMQ would not take (the peer gone, or not reading)")),
      store_commits_(add_counter(*registry_, "forktrial_store_commits_total",
                                 "Write transactions the coordinator committed to its store")),
      store_syncs_(add_counter(*registry_, "forktrial_store_syncs_total",
                               "Forced flushes of the coordinator's store to its disk")),
      reconciliation_(add_histogram(*registry_, "forktrial_reconciliation_duration_seconds",
                                    "From a report's arrival to the commit that reconciled it",
                                    kReconciliationBuckets)),
      job_queued_(prometheus::BuildGauge()
                      .Name("forktrial_job_queued_trials")
                      .Help("Queued trials of each unfinished job")
                      .Register(*registry_)),
      workers_alive_(
          add_gauge(*registry_, "forktrial_workers_alive", "Workers the coordinator holds alive")),
      slots_(add_gauge(*registry_, "forktrial_cluster_slots", "Trial slots of the live workers")),
      slots_busy_(add_gauge(*registry_, "forktrial_cluster_slots_busy",
                            "Trial slots of the live workers holding a lease (at most each "
                            "worker's slots)")),
      store_full_(add_gauge(*registry_, "forktrial_store_full",
                            "1 while the store is full and the coordinator takes no writes")),
      store_bytes_(
          add_gauge(*registry_, "forktrial_store_bytes", "Size of the store's data file on disk")),
      map_bytes_(add_gauge(*registry_, "forktrial_store_map_bytes",
                           "The store's LMDB map now (doubled whenever a write needs room)")),
      map_limit_bytes_(add_gauge(*registry_, "forktrial_store_map_limit_bytes",
                                 "The most the store's LMDB map grows to: writes past it are "
                                 "refused as a full store")),
      disk_free_bytes_(add_gauge(*registry_, "forktrial_store_disk_free_bytes",
                                 "Free space of the disk holding the store")),
      log_records_(add_gauge(*registry_, "forktrial_orchestration_log_records",
                             "Records in the orchestration log")),
      process_(*registry_) {
  add_gauge(*registry_, "forktrial_build_info",
            "This coordinator's version, wire protocol and store schema (value 1)",
            {{"version", FORKTRIAL_VERSION},
             {"wire_protocol", std::to_string(schema::wire::K_PROTOCOL_VERSION)},
             {"store_schema", std::to_string(store::kSchemaVersion)}})
      .Set(1);
  const std::string blobs_help =
      "Blob bytes through the coordinator: uploaded by clients, served to workers in chunks";
  blob_bytes_[static_cast<std::size_t>(BlobDirection::uploaded)] = &add_counter(
      *registry_, "forktrial_blob_bytes_total", blobs_help, {{"direction", "uploaded"}});
  blob_bytes_[static_cast<std::size_t>(BlobDirection::served)] =
      &add_counter(*registry_, "forktrial_blob_bytes_total", blobs_help, {{"direction", "served"}});
  const std::string jobs_help = "Jobs: active (some trial not done yet) or finished";
  jobs_[0] = &add_gauge(*registry_, "forktrial_jobs", jobs_help, {{"state", "active"}});
  jobs_[1] = &add_gauge(*registry_, "forktrial_jobs", jobs_help, {{"state", "finished"}});
  for (std::size_t s = 0; s < kTrialStatusCount; ++s) {
    trials_[s] = &add_gauge(
        *registry_, "forktrial_trials", "Trials of every job the coordinator holds, by status",
        {{"status", std::string(trial_status_name(static_cast<TrialStatus>(s)))}});
  }
}

void CoordinatorMetrics::committed(std::span<const OrchestrationRecord> records) {
  for (const OrchestrationRecord& record : records) {
    std::visit(
        [this](const auto& r) {
          using Record = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<Record, TrialLeased>) {
            attempts_.Increment();
          } else if constexpr (std::is_same_v<Record, TrialRequeued>) {
            requeued_.Increment();
          } else if constexpr (std::is_same_v<Record, TrialCached>) {
            cached_.Increment();
          } else if constexpr (std::is_same_v<Record, TrialAbandoned>) {
            abandoned_.Increment();
          } else if constexpr (std::is_same_v<Record, TrialFenced>) {
            fenced_.Increment();
          } else if constexpr (std::is_same_v<Record, JobSubmitted>) {
            jobs_submitted_.Increment();
            active_jobs_.try_emplace(r.job, nullptr);
          } else if constexpr (std::is_same_v<Record, WorkerJoined>) {
            workers_joined_.Increment();
            alive_workers_.insert(r.worker);
          } else if constexpr (std::is_same_v<Record, WorkerLost>) {
            workers_lost_.Increment();
            alive_workers_.erase(r.worker);
          }
        },
        record);
  }
  if (expiries_decided_ > 0) {
    lease_expiries_.Increment(static_cast<double>(expiries_decided_));
    expiries_decided_ = 0;
  }
}

void CoordinatorMetrics::ticked(const Records& tick) {
  expiries_decided_ += lease_expiries_in(tick);
}

void CoordinatorMetrics::undone() {
  expiries_decided_ = 0;
}

void CoordinatorMetrics::reconciled(Outcome outcome, std::chrono::steady_clock::duration latency,
                                    std::chrono::milliseconds trial) {
  reconciled_.observe(outcome, trial);
  reconciliation_.Observe(std::chrono::duration<double>(latency).count());
}

void CoordinatorMetrics::blob_bytes(BlobDirection direction, std::uint64_t bytes) {
  blob_bytes_[static_cast<std::size_t>(direction)]->Increment(static_cast<double>(bytes));
}

void CoordinatorMetrics::observe(const Scheduler& scheduler, bool store_full) {
  Counts counts = finished_counts_;
  for (auto it = active_jobs_.begin(); it != active_jobs_.end();) {
    const auto status = scheduler.job_status(it->first);
    if (!status) {  // not in the scheduler (a decision undone): nothing to show
      if (it->second != nullptr) job_queued_.Remove(it->second);
      it = active_jobs_.erase(it);
      continue;
    }
    if (status->finished()) {
      for (std::size_t s = 0; s < kTrialStatusCount; ++s) finished_counts_[s] += status->counts[s];
      ++finished_jobs_;
      if (it->second != nullptr) job_queued_.Remove(it->second);
      it = active_jobs_.erase(it);
    } else {
      if (it->second == nullptr) it->second = &job_queued_.Add({{"job_id", it->first.str()}});
      it->second->Set(static_cast<double>(status->count(TrialStatus::queued)));
      ++it;
    }
    for (std::size_t s = 0; s < kTrialStatusCount; ++s) counts[s] += status->counts[s];
  }
  for (std::size_t s = 0; s < kTrialStatusCount; ++s) {
    trials_[s]->Set(static_cast<double>(counts[s]));
  }
  jobs_[0]->Set(static_cast<double>(active_jobs_.size()));
  jobs_[1]->Set(static_cast<double>(finished_jobs_));

  std::uint64_t total = 0;
  std::uint64_t busy = 0;
  for (auto it = alive_workers_.begin(); it != alive_workers_.end();) {
    const auto worker = scheduler.worker_status(*it);
    if (!worker || !worker->alive) {
      it = alive_workers_.erase(it);
      continue;
    }
    total += worker->slots;
    busy += worker->running();
    ++it;
  }
  workers_alive_.Set(static_cast<double>(alive_workers_.size()));
  slots_.Set(static_cast<double>(total));
  slots_busy_.Set(static_cast<double>(busy));
  store_full_.Set(store_full ? 1 : 0);
}

void CoordinatorMetrics::observe_store(const StoreDisk& disk,
                                       std::optional<std::uint64_t> log_records) {
  store_bytes_.Set(static_cast<double>(disk.store_bytes));
  map_bytes_.Set(static_cast<double>(disk.map_bytes));
  map_limit_bytes_.Set(static_cast<double>(disk.map_limit_bytes));
  if (disk.free_bytes) disk_free_bytes_.Set(static_cast<double>(*disk.free_bytes));
  if (log_records) log_records_.Set(static_cast<double>(*log_records));
}

void CoordinatorMetrics::resync(const Scheduler& scheduler) {
  for (const auto& [job, queued] : active_jobs_) {
    if (queued != nullptr) job_queued_.Remove(queued);
  }
  active_jobs_.clear();
  finished_counts_ = {};
  finished_jobs_ = 0;
  for (const JobStatus& job : scheduler.jobs()) {
    if (job.finished()) {
      for (std::size_t s = 0; s < kTrialStatusCount; ++s) finished_counts_[s] += job.counts[s];
      ++finished_jobs_;
    } else {
      active_jobs_.emplace(job.id, nullptr);
    }
  }
  alive_workers_.clear();
  for (const WorkerStatus& worker : scheduler.workers()) {
    if (worker.alive) alive_workers_.insert(worker.id);
  }
}

void CoordinatorMetrics::store_writes(std::uint64_t commits, std::uint64_t syncs) {
  const auto catch_up = [](prometheus::Counter& counter, std::uint64_t total) {
    const double now = static_cast<double>(total);
    if (now > counter.Value()) counter.Increment(now - counter.Value());
  };
  catch_up(store_commits_, commits);
  catch_up(store_syncs_, syncs);
}

}  // namespace forktrial::coordinator
