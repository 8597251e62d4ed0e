#include "tests/sandbox/recording_executor.h"

namespace forktrial::testing {

sandbox::TrialReport RecordingExecutor::execute(store::EventStore&,
                                                const sandbox::TrialSpecification& spec) {
  std::lock_guard lock(mutex_);
  executed_.push_back(spec);
  if (queued_.empty()) {
    sandbox::TrialReport report;
    report.outcome = Outcome::completed;
    return report;
  }
  sandbox::TrialReport report = std::move(queued_.front());
  queued_.pop_front();
  return report;
}

void RecordingExecutor::queue_report(sandbox::TrialReport report) {
  std::lock_guard lock(mutex_);
  queued_.push_back(std::move(report));
}

std::vector<sandbox::TrialSpecification> RecordingExecutor::executed() const {
  std::lock_guard lock(mutex_);
  return executed_;
}

}  // namespace forktrial::testing
