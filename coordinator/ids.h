// The coordinator's typed identifiers and its unit of time.
//
// A JobId and a WorkerId are opaque text chosen by whoever submitted the job
// or started the worker (store::StringId, so neither can be passed for the
// other, nor for a run id). A trial has no name of its own: it is the
// `index`-th trial of its job, in the order the job listed them, so the same
// submission always gives the same trial ids, and a coordinator replaying its
// records finds the trials it leased before it stopped.
//
// An attempt numbers the leases of one trial from 1; a trial that is
// requeued is leased next with its attempt plus one, and a report names the
// attempt it ran, which is how a superseded attempt is told from the current
// one (fencing).
//
// Time is the caller's: every input of the scheduler carries an Instant, the
// milliseconds since the Unix epoch by the coordinator's clock (wall time, so
// that a lease expiry recorded before a restart still means something after
// it). Nothing in the coordinator reads a clock of its own.
//
// Plain values: copyable, safe to share between threads.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <string>

#include "store/ids.h"

namespace forktrial::coordinator {

using JobId = store::StringId<struct JobIdTag>;
using WorkerId = store::StringId<struct WorkerIdTag>;

using Attempt = std::uint32_t;

using Duration = std::chrono::milliseconds;
using Instant = std::chrono::sys_time<Duration>;

struct TrialId {
  JobId job;
  std::uint32_t index = 0;  // the trial's position in its job's submission

  // "<job>#<index>", for messages.
  std::string str() const { return job.str() + "#" + std::to_string(index); }

  friend bool operator==(const TrialId&, const TrialId&) = default;
  friend auto operator<=>(const TrialId&, const TrialId&) = default;
};

// The run a trial's attempt is recorded as, "run_<job>_<index>_a<attempt>":
// one per attempt, so a superseded attempt can never write into the fork of
// the one that replaced it.
inline store::RunId fork_run_of(const TrialId& trial, Attempt attempt) {
  return store::RunId("run_" + trial.job.str() + "_" + std::to_string(trial.index) + "_a" +
                      std::to_string(attempt));
}

}  // namespace forktrial::coordinator
