// A test double of the executor seam (sandbox/executor.h): records every
// specification it is given and answers with the reports queued by the test,
// or a `completed` report when none is queued. It runs nothing. Thread-safe.
#pragma once

#include <deque>
#include <mutex>
#include <vector>

#include "sandbox/executor.h"

namespace forktrial::testing {

class RecordingExecutor final : public sandbox::TrialExecutor {
 public:
  const sandbox::IsolationGuarantees& isolation() const override { return isolation_; }
  sandbox::TrialReport execute(store::EventStore& store,
                               const sandbox::TrialSpecification& spec) override;

  void queue_report(sandbox::TrialReport report);
  std::vector<sandbox::TrialSpecification> executed() const;

 private:
  sandbox::IsolationGuarantees isolation_;  // a double provides nothing
  mutable std::mutex mutex_;
  std::vector<sandbox::TrialSpecification> executed_;  // guarded by mutex_
  std::deque<sandbox::TrialReport> queued_;            // guarded by mutex_
};

}  // namespace forktrial::testing
