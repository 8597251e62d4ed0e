#include "coordinator/activity.h"

#include <algorithm>
#include <nlohmann/json.hpp>
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

std::string Activity::failures_text() const {
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& failure : failures_) {
    failures.push_back({{"job", failure.trial.job.str()},
                        {"index", failure.trial.index},
                        {"at", failure.at.time_since_epoch().count()}});
  }
  return nlohmann::json{{"failures", std::move(failures)}}.dump();
}

void Activity::restore_failures(std::string_view payload) {
  const auto doc = nlohmann::json::parse(payload, nullptr, false);
  if (!doc.is_object() || !doc.contains("failures") || !doc["failures"].is_array()) return;
  for (const auto& failure : doc["failures"]) {
    if (failures_.size() >= kFailuresKept) return;
    if (!failure.is_object() || !failure.contains("job") || !failure["job"].is_string() ||
        !failure.contains("index") || !failure["index"].is_number_unsigned() ||
        !failure.contains("at") || !failure["at"].is_number_integer()) {
      continue;
    }
    failures_.push_back(Failure{
        TrialId{JobId(failure["job"].get<std::string>()), failure["index"].get<std::uint32_t>()},
        Instant{Duration{failure["at"].get<std::int64_t>()}}});
  }
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
