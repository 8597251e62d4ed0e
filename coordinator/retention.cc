#include "coordinator/retention.h"

#include <algorithm>
#include <set>
#include <utility>

#include "base/timestamp.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/scheduler.h"

namespace forktrial::coordinator {

namespace {

// Whether the policy keeps the fork of a trial with `outcome`.
bool kept(KeepForks keep, Outcome outcome) {
  return keep == KeepForks::all || (keep == KeepForks::failures && outcome != Outcome::completed);
}

}  // namespace

std::expected<GcPlan, Status> plan_gc(const store::Snapshot& snapshot,
                                      const RetentionPolicy& policy, Instant now,
                                      Duration blob_grace) {
  GcPlan plan;
  // The blobs unfinished jobs' trials need.
  std::set<Digest> needed;
  // Runs other runs fork from, and the runs there are.
  std::set<store::RunId> parents;
  std::set<store::RunId> present;
  std::vector<store::RunInfo> local;
  for (store::RunInfo& run : snapshot.runs()) {
    if (run.fork_of) parents.insert(run.fork_of->parent);
    if (run.id.str().starts_with(store::kTrialForkPrefix)) local.push_back(run);
    present.insert(std::move(run.id));
  }
  const auto take = [&](const store::RunId& fork) {
    if (parents.contains(fork)) {
      ++plan.forks_forked_from;
      return;
    }
    plan.forks.push_back(fork);
  };

  // The jobs, as a restarted coordinator sees them.
  // Records that do not apply are set aside, as the coordinator's start
  // sets them aside.
  Scheduler scheduler;
  auto read = replay_setting_aside(
      snapshot, [&] { scheduler = Scheduler(); },
      [&](OrchestrationRecord&& record) { scheduler.replay(std::move(record)); },
      [](const store::EventView&) {});
  if (!read) return std::unexpected(read.error());
  for (const JobStatus& job : scheduler.jobs()) {
    if (!job.finished() || !job.finished_at) {
      ++plan.jobs_unfinished;
      scheduler.visit_trials(job.id, [&](const TrialSummary& trial) {
        const auto input = scheduler.trial_input(TrialId{job.id, trial.index});
        if (!input) return;
        needed.insert(input->segment);
        needed.insert(input->bundles.begin(), input->bundles.end());
      });
      continue;
    }
    // The job's own policy, when it recorded one.
    const RetentionPolicy& applied = job.retention.value_or(policy);
    if (now - *job.finished_at < applied.after) {
      ++plan.jobs_too_recent;
      continue;
    }
    ++plan.jobs_collected;
    if (job.retention) ++plan.jobs_own_policy;
    const auto consider = [&](std::uint32_t index, TrialStatus status,
                              std::optional<Outcome> outcome, Attempt attempt) {
      if (status != TrialStatus::reconciled || !outcome) return;
      if (kept(applied.keep, *outcome)) {
        ++plan.forks_kept;
        return;
      }
      const store::RunId fork = fork_run_of(TrialId{job.id, index}, attempt);
      if (!present.contains(fork)) {
        ++plan.forks_gone;
        return;
      }
      take(fork);
    };
    if (job.archived) {
      auto visited = visit_archive(snapshot, job.id, [&](ArchivedTrial&& trial) {
        consider(trial.index, trial.status, trial.outcome, trial.attempt);
      });
      if (!visited) return std::unexpected(visited.error());
      continue;
    }
    scheduler.visit_trials(job.id, [&](const TrialSummary& trial) {
      consider(trial.index, trial.status, trial.outcome,
               scheduler.trial_state(TrialId{job.id, trial.index})->attempt);
    });
  }

  // Local trials' forks: their outcome is not in the store, so only `none`
  // collects them, by age.
  for (const store::RunInfo& run : local) {
    const auto created = parse_timestamp(run.created_at);
    const bool old_enough = created && now - Instant(Duration(*created)) >= policy.after;
    if (policy.keep != KeepForks::none || !old_enough) {
      ++plan.local_forks_kept;
      continue;
    }
    const std::size_t before = plan.forks.size();
    take(run.id);
    plan.local_forks += plan.forks.size() - before;
  }

  const Instant cutoff = now - blob_grace;
  plan.blobs_stored_before = format_timestamp(cutoff.time_since_epoch().count());
  for (const store::BlobInfo& blob : snapshot.blobs()) {
    if (needed.contains(blob.digest)) {
      ++plan.blobs_needed;
      continue;
    }
    std::optional<UnixMillis> stored;
    if (blob.stored_at) {
      if (auto parsed = parse_timestamp(*blob.stored_at)) stored = *parsed;
    }
    if (!stored) {
      plan.blobs_unstamped.push_back(blob.digest);
    } else if (Instant(Duration(*stored)) >= cutoff) {
      ++plan.blobs_recent;
    } else {
      plan.blobs.push_back(blob.digest);
      plan.blob_bytes += blob.size;
    }
  }
  return plan;
}

GcResult apply_gc(store::EventStore& store, std::span<const store::RunId> forks, std::size_t batch,
                  const std::function<void(std::uint64_t done)>& progress) {
  GcResult result;
  const auto add = [&](const store::DeletedRuns& deleted) {
    result.deleted.runs += deleted.runs;
    result.deleted.events += deleted.events;
    result.deleted.bytes += deleted.bytes;
  };
  batch = std::max<std::size_t>(batch, 1);
  for (std::size_t from = 0; from < forks.size(); from += batch) {
    const auto part = forks.subspan(from, std::min(batch, forks.size() - from));
    if (auto deleted = store.delete_runs(part)) {
      add(*deleted);
    } else {
      for (const store::RunId& fork : part) {
        auto one = store.delete_runs(std::span(&fork, 1));
        if (one) {
          add(*one);
        } else if (one.error().kind != store::Refused::unknown_run) {
          result.skipped.push_back(fork.str() + ": " + one.error().message);
        }
      }
    }
    if (progress) progress(from + part.size());
  }
  return result;
}

store::DeletedBlobs apply_gc_blobs(store::EventStore& store, std::span<const Digest> blobs,
                                   std::string_view stored_before, std::size_t batch,
                                   const std::function<void(std::uint64_t done)>& progress) {
  store::DeletedBlobs total;
  batch = std::max<std::size_t>(batch, 1);
  for (std::size_t from = 0; from < blobs.size(); from += batch) {
    const auto part = blobs.subspan(from, std::min(batch, blobs.size() - from));
    const store::DeletedBlobs deleted = store.delete_blobs(part, stored_before);
    total.blobs += deleted.blobs;
    total.bytes += deleted.bytes;
    total.kept_recent += deleted.kept_recent;
    total.kept_unstamped += deleted.kept_unstamped;
    if (progress) progress(from + part.size());
  }
  return total;
}

}  // namespace forktrial::coordinator
