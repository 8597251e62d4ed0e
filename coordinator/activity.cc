#include "coordinator/activity.h"

#include <algorithm>
#include <variant>

namespace forktrial::coordinator {
namespace {

std::int64_t second_of(Instant at) {
  return std::chrono::floor<std::chrono::seconds>(at).time_since_epoch().count();
}

}  // namespace

void Activity::note(const OrchestrationRecord& record) {
  if (const auto* reconciled = std::get_if<TrialReconciled>(&record)) {
    ended(reconciled->trial, reconciled->at);
    if (reconciled->outcome == Outcome::completed) return;
    failures_.push_front(Failure{reconciled->trial, reconciled->at});
  } else if (const auto* abandoned = std::get_if<TrialAbandoned>(&record)) {
    ended(abandoned->trial, abandoned->at);
    failures_.push_front(Failure{abandoned->trial, abandoned->at});
  } else {
    return;
  }
  if (failures_.size() > kFailuresKept) failures_.pop_back();
}

void Activity::ended(const TrialId& trial, Instant at) {
  auto& ends = ends_[trial.job];
  const std::int64_t second = second_of(at);
  if (!ends.empty() && ends.back().first == second) {
    ++ends.back().second;
  } else {
    ends.emplace_back(second, 1);
  }
  const std::int64_t oldest = second_of(at - kPaceWindow);
  while (!ends.empty() && ends.front().first < oldest) ends.pop_front();
}

void Activity::clear() {
  failures_.clear();
  ends_.clear();
}

double Activity::throughput(const JobStatus& job, Instant now) const {
  using Seconds = std::chrono::duration<double>;
  if (job.finished_at) {
    const std::uint64_t ended =
        job.count(TrialStatus::reconciled) + job.count(TrialStatus::abandoned);
    const Seconds run = std::max<Duration>(*job.finished_at - job.submitted_at, Duration(1));
    return static_cast<double>(ended) / run.count();
  }
  const Instant from = std::max(now - kPaceWindow, job.submitted_at);
  if (now <= from) return 0.0;
  const auto ends = ends_.find(job.id);
  if (ends == ends_.end()) return 0.0;
  const std::int64_t oldest = second_of(from);
  std::uint64_t ended = 0;
  for (const auto& [second, count] : ends->second) {
    if (second >= oldest) ended += count;
  }
  return static_cast<double>(ended) / Seconds(now - from).count();
}

}  // namespace forktrial::coordinator
