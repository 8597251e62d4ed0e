// What the coordinator's status page tells beyond the scheduler's state: the
// trials that ended badly most recently, and how fast each job's trials end.
//
// Fed every orchestration record as it is applied: live, and at replay, where
// the records' own times draw the same picture, so a restarted coordinator
// shows the failures and the pace it showed before. Bounded: the last
// kFailuresKept failures, and per job the ends of the last kPaceWindow in
// one-second buckets.
//
// Not thread-safe: the coordinator's loop thread owns it. References returned
// are valid until the next note() or clear().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>

#include "coordinator/ids.h"
#include "coordinator/orchestration.h"
#include "coordinator/scheduler.h"

namespace forktrial::coordinator {

class Activity {
 public:
  static constexpr std::size_t kFailuresKept = 100;
  static constexpr Duration kPaceWindow{60'000};

  // A trial that ended without completing: reconciled with another outcome,
  // or abandoned.
  struct Failure {
    TrialId trial;
    Instant at;
  };

  void note(const OrchestrationRecord& record);
  void clear();

  // The failures as the payload of an event of kFailuresType, which a
  // compacted log holds (its records no longer do): {"failures": [{"job",
  // "index", "at"}, ...], newest first}.
  static constexpr std::string_view kFailuresType = "activity.failures";
  std::string failures_text() const;
  // Takes the failures of such a payload as the oldest known, behind those
  // noted so far; a payload that is not one is ignored (what the status
  // page shows is not worth refusing a log over).
  void restore_failures(std::string_view payload);

  // Newest first.
  const std::deque<Failure>& failures() const { return failures_; }

  // Trials of the job that ended (reconciled or abandoned) per second: over
  // the kPaceWindow before `now`, or since the job was submitted when that
  // is later; for a finished job, over its whole run, submission to finish.
  double throughput(const JobStatus& job, Instant now) const;

 private:
  void ended(const TrialId& trial, Instant at);

  std::deque<Failure> failures_;
  // Per job: (second since the epoch, trials that ended in it), oldest first.
  std::map<JobId, std::deque<std::pair<std::int64_t, std::uint32_t>>> ends_;
};

}  // namespace forktrial::coordinator
