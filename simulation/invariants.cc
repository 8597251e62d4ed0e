#include "simulation/invariants.h"

#include <variant>

namespace forktrial::simulation {

using namespace coordinator;

namespace {

std::string at_text(Instant at) {
  return "at " + std::to_string(at.time_since_epoch().count()) + " ms";
}

std::string attempt_text(const TrialId& trial, Attempt attempt) {
  return trial.str() + " attempt " + std::to_string(attempt);
}

bool final_status(TrialStatus status) {
  return status == TrialStatus::reconciled || status == TrialStatus::abandoned ||
         status == TrialStatus::cancelled;
}

}  // namespace

Invariants::Trial* Invariants::trial(const TrialId& id) {
  auto job = jobs_.find(id.job);
  if (job == jobs_.end() || id.index >= job->second.size) return nullptr;
  return &trials_[job->second.first + id.index];
}

std::uint32_t Invariants::worker_index(const WorkerId& worker) {
  auto [it, added] =
      worker_ids_.try_emplace(worker.str(), static_cast<std::uint32_t>(worker_ids_.size()));
  if (added) leases_held_.push_back(0);
  return it->second;
}

std::optional<std::string> Invariants::committed(std::span<const OrchestrationRecord> records) {
  for (const OrchestrationRecord& record : records) {
    if (auto broken = apply(record)) return broken;
  }
  return std::nullopt;
}

// The attempt's lease (or its report) ends: requeued or abandoned.
std::optional<std::string> Invariants::end_attempt(const TrialId& id, Attempt attempt,
                                                   TrialStatus next, Instant at) {
  Trial* t = trial(id);
  if (t == nullptr) return "an unknown trial " + id.str() + " ended an attempt, " + at_text(at);
  const bool live = t->status == TrialStatus::leased || t->status == TrialStatus::reported;
  if (!live || t->attempt != attempt) {
    return attempt_text(id, attempt) + " failed, but it is not the trial's live attempt (" +
           std::string(trial_status_name(t->status)) + ", attempt " + std::to_string(t->attempt) +
           "), " + at_text(at);
  }
  if (t->status == TrialStatus::leased) --leases_held_[t->worker];
  t->status = next;
  Job& job = jobs_.at(id.job);
  if (next == TrialStatus::queued) {
    if (job.queued++ == 0) job.mark = leases_[job.priority];  // back in its round, at the end
  } else {
    ++ended_;
  }
  return std::nullopt;
}

std::optional<std::string> Invariants::apply(const OrchestrationRecord& record) {
  if (const auto* r = std::get_if<JobSubmitted>(&record)) {
    if (jobs_.contains(r->job))
      return "job " + r->job.str() + " submitted twice, " + at_text(r->at);
    Job& job = jobs_[r->job];
    job.priority = r->priority;
    job.first = trials_.size();
    job.size = static_cast<std::uint32_t>(r->trials.size());
    job.queued = job.size;
    job.mark = leases_[job.priority];
    ++jobs_of_priority_[job.priority];
    trials_.resize(trials_.size() + job.size);
    return std::nullopt;
  }
  if (const auto* r = std::get_if<JobCancelled>(&record)) {
    auto it = jobs_.find(r->job);
    if (it == jobs_.end()) return "an unknown job " + r->job.str() + " was cancelled";
    Job& job = it->second;
    // Queued and leased trials are cancelled; reported ones go on.
    for (std::uint32_t i = 0; i < job.size; ++i) {
      Trial& t = trials_[job.first + i];
      if (t.status != TrialStatus::queued && t.status != TrialStatus::leased) continue;
      if (t.status == TrialStatus::leased) --leases_held_[t.worker];
      t.status = TrialStatus::cancelled;
      ++ended_;
    }
    job.queued = 0;
    return std::nullopt;
  }
  if (const auto* r = std::get_if<WorkerJoined>(&record)) {
    worker_index(r->worker);
    return std::nullopt;
  }
  if (const auto* r = std::get_if<WorkerLost>(&record)) {
    const std::uint32_t w = worker_index(r->worker);
    if (leases_held_[w] != 0) {
      return "worker " + r->worker.str() + " was lost holding " + std::to_string(leases_held_[w]) +
             " leases, " + at_text(r->at);
    }
    return std::nullopt;
  }
  if (const auto* r = std::get_if<LeasesRenewed>(&record)) {
    const std::uint32_t w = worker_index(r->worker);
    for (const AttemptRef& ref : r->renewed) {
      const Trial* t = trial(ref.trial);
      if (t == nullptr || t->status != TrialStatus::leased || t->attempt != ref.attempt ||
          t->worker != w) {
        return "worker " + r->worker.str() + " renewed " + attempt_text(ref.trial, ref.attempt) +
               ", a lease it does not hold, " + at_text(r->at);
      }
    }
    return std::nullopt;
  }
  if (const auto* r = std::get_if<TrialLeased>(&record)) {
    Trial* t = trial(r->trial);
    if (t == nullptr) return "an unknown trial " + r->trial.str() + " was leased";
    if (t->status != TrialStatus::queued) {
      return attempt_text(r->trial, r->attempt) + " was leased to " + r->worker.str() +
             " while the trial is " + std::string(trial_status_name(t->status)) + " (attempt " +
             std::to_string(t->attempt) + "): leases overlap, " + at_text(r->at);
    }
    if (r->attempt <= t->attempt) {
      return attempt_text(r->trial, r->attempt) + " was leased after attempt " +
             std::to_string(t->attempt) + ", " + at_text(r->at);
    }
    t->status = TrialStatus::leased;
    t->attempt = r->attempt;
    t->worker = worker_index(r->worker);
    ++leases_held_[t->worker];
    Job& job = jobs_.at(r->trial.job);
    if (auto unfair = fair(r->trial.job, r->at)) return unfair;
    --job.queued;
    job.mark = ++leases_[job.priority];
    return std::nullopt;
  }
  if (const auto* r = std::get_if<TrialRequeued>(&record)) {
    return end_attempt(r->trial, r->attempt, TrialStatus::queued, r->at);
  }
  if (const auto* r = std::get_if<TrialAbandoned>(&record)) {
    return end_attempt(r->trial, r->attempt, TrialStatus::abandoned, r->at);
  }
  if (const auto* r = std::get_if<TrialReported>(&record)) {
    Trial* t = trial(r->trial);
    if (t == nullptr || t->status != TrialStatus::leased || t->attempt != r->attempt ||
        t->worker != worker_index(r->worker)) {
      return "a report of " + attempt_text(r->trial, r->attempt) + " by " + r->worker.str() +
             " was accepted, but that is not the trial's live lease, " + at_text(r->at);
    }
    --leases_held_[t->worker];
    t->status = TrialStatus::reported;
    return std::nullopt;
  }
  if (const auto* r = std::get_if<TrialFenced>(&record)) {
    const Trial* t = trial(r->trial);
    if (t != nullptr && t->status == TrialStatus::leased && t->attempt == r->attempt &&
        t->worker == worker_index(r->worker)) {
      return "the report of " + attempt_text(r->trial, r->attempt) + " by " + r->worker.str() +
             ", the live lease's holder, was fenced, " + at_text(r->at);
    }
    return std::nullopt;
  }
  if (const auto* r = std::get_if<TrialReconciled>(&record)) {
    Trial* t = trial(r->trial);
    if (t == nullptr) return "an unknown trial " + r->trial.str() + " was reconciled";
    if (t->status == TrialStatus::reconciled) {
      return r->trial.str() + " was reconciled twice, " + at_text(r->at);
    }
    if (t->status != TrialStatus::reported || t->attempt != r->attempt) {
      return attempt_text(r->trial, r->attempt) + " was reconciled while the trial is " +
             std::string(trial_status_name(t->status)) + " (attempt " + std::to_string(t->attempt) +
             "), " + at_text(r->at);
    }
    t->status = TrialStatus::reconciled;
    ++ended_;
    return std::nullopt;
  }
  if (const auto* r = std::get_if<TrialCached>(&record)) {
    // Answered from the result cache: a queued trial never leased, from a
    // source reconciled before it (once: it is the same exactly-once).
    Trial* t = trial(r->trial);
    if (t == nullptr) return "an unknown trial " + r->trial.str() + " was answered from the cache";
    if (t->status != TrialStatus::queued || t->attempt != 0) {
      return r->trial.str() + " was answered from the cache while it is " +
             std::string(trial_status_name(t->status)) + " (attempt " + std::to_string(t->attempt) +
             "), " + at_text(r->at);
    }
    const Trial* source = trial(r->source);
    if (source != nullptr && source->status != TrialStatus::reconciled) {
      return r->trial.str() + " was answered from the cache with " + r->source.str() +
             ", which is " + std::string(trial_status_name(source->status)) + ", " + at_text(r->at);
    }
    t->status = TrialStatus::reconciled;
    --jobs_.at(r->trial.job).queued;
    ++ended_;
    return std::nullopt;
  }
  return std::nullopt;
}

void Invariants::job_acknowledged(const JobId& job) {
  if (auto it = jobs_.find(job); it != jobs_.end()) it->second.acknowledged = true;
}

std::optional<std::string> Invariants::report_acknowledged(const TrialId& id, Attempt attempt) {
  Trial* t = trial(id);
  if (t == nullptr || t->status != TrialStatus::reconciled || t->attempt != attempt) {
    return "the report of " + attempt_text(id, attempt) +
           " was acknowledged as accepted before its reconciliation was committed";
  }
  t->acknowledged = true;
  return std::nullopt;
}

// Served by priority, then in turn: a job with queued trials sees no lower
// priority served before it, and at most one lease for each other job of its
// priority (those ahead of it in the round) since it last was served or
// joined the round.
std::optional<std::string> Invariants::fair(const JobId& leased, Instant at) const {
  const Job& served = jobs_.at(leased);
  for (const auto& [id, job] : jobs_) {
    if (id == leased || job.queued == 0) continue;
    if (job.priority > served.priority) {
      return "job " + leased.str() + " (priority " + std::to_string(served.priority) +
             ") was leased a trial while job " + id.str() + " (priority " +
             std::to_string(job.priority) + ") has " + std::to_string(job.queued) + " queued, " +
             at_text(at);
    }
    if (job.priority < served.priority) continue;
    const std::uint64_t others = leases_.at(job.priority) - job.mark;
    if (others + 1 >= jobs_of_priority_.at(job.priority)) {
      return "job " + id.str() + " starves: it has " + std::to_string(job.queued) +
             " trials queued and jobs of its priority (" + std::to_string(job.priority) +
             ") have been leased " + std::to_string(others + 1) + " in a row without it, " +
             at_text(at);
    }
  }
  return std::nullopt;
}

namespace {

// The trial's status as the coordinator holds it: its scheduler's, or its
// archive's.
std::optional<TrialStatus> status_of(const Scheduler& scheduler,
                                     const Invariants::ArchivedStatus& archived,
                                     const TrialId& trial) {
  if (const auto state = scheduler.trial_state(trial)) return state->status;
  if (archived) return archived(trial);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> Invariants::after_restart(const Scheduler& scheduler,
                                                     const ArchivedStatus& archived) const {
  for (const auto& [id, job] : jobs_) {
    const auto status = scheduler.job_status(id);
    if (!status || status->trials != job.size) {
      return "job " + id.str() + (job.acknowledged ? ", acknowledged to its client," : "") +
             " is not whole after the restart";
    }
    for (std::uint32_t i = 0; i < job.size; ++i) {
      const Trial& t = trials_[job.first + i];
      if (t.status != TrialStatus::reconciled) continue;
      const auto state = status_of(scheduler, archived, TrialId{id, i});
      if (!state || *state != TrialStatus::reconciled) {
        return TrialId{id, i}.str() + std::string(t.acknowledged ? ", acknowledged," : "") +
               " was reconciled, but not after the restart";
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> Invariants::at_end(const Scheduler& scheduler,
                                              const ArchivedStatus& archived) const {
  for (const auto& [id, job] : jobs_) {
    for (std::uint32_t i = 0; i < job.size; ++i) {
      const TrialId trial_id{id, i};
      const Trial& t = trials_[job.first + i];
      if (!final_status(t.status)) {
        return trial_id.str() + " never ended (" + std::string(trial_status_name(t.status)) + ")";
      }
      const auto state = status_of(scheduler, archived, trial_id);
      if (!state || *state != t.status) {
        return trial_id.str() + " ended " + std::string(trial_status_name(t.status)) +
               " by the log, but the coordinator says " +
               (state ? std::string(trial_status_name(*state)) : "nothing");
      }
    }
  }
  return std::nullopt;
}

}  // namespace forktrial::simulation
