// The simulation's referee: a model of the cluster's promises, kept apart
// from the scheduler and fed only what the coordinator committed and what it
// told its peers. It never reads the scheduler's state to decide what is
// right; it reads it only to compare (after a restart, and at the end).
//
// Each check returns the first broken promise as text (what, which trial or
// job, the virtual time), or nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/orchestration.h"
#include "coordinator/scheduler.h"

namespace forktrial::simulation {

using coordinator::Instant;
using coordinator::OrchestrationRecord;
using coordinator::TrialId;

class Invariants {
 public:
  Invariants() = default;

  // Records that one commit made durable, in their order.
  std::optional<std::string> committed(std::span<const OrchestrationRecord> records);
  // The client was told its job was accepted.
  void job_acknowledged(const coordinator::JobId& job);
  // A worker was told its report of `attempt` was accepted.
  std::optional<std::string> report_acknowledged(const TrialId& trial,
                                                 coordinator::Attempt attempt);
  // No job starves: while a job has queued trials, no job of a lower
  // priority is leased one, and jobs of its own priority are leased at most
  // one each (its round) before it is. Checked at every lease.
  // A trial's status where the scheduler no longer holds it (its job is
  // archived); none when unknown there too.
  using ArchivedStatus =
      std::function<std::optional<coordinator::TrialStatus>(const coordinator::TrialId&)>;
  // A scheduler rebuilt from the log keeps everything acknowledged.
  std::optional<std::string> after_restart(const coordinator::Scheduler& scheduler,
                                           const ArchivedStatus& archived = {}) const;
  // Every trial ended once, and the scheduler (or the archive) agrees with
  // the model.
  std::optional<std::string> at_end(const coordinator::Scheduler& scheduler,
                                    const ArchivedStatus& archived = {}) const;

  std::uint64_t ended() const { return ended_; }

 private:
  struct Trial {
    coordinator::TrialStatus status = coordinator::TrialStatus::queued;
    coordinator::Attempt attempt = 0;  // the highest leased so far
    std::uint32_t worker = 0;          // its holder
    bool acknowledged = false;         // a report of it was acknowledged as accepted
  };
  struct Job {
    int priority = 0;
    std::uint64_t first = 0;  // index of its trial 0 in trials_
    std::uint32_t size = 0;
    std::uint64_t queued = 0;
    // leases_[priority] when it last was leased a trial or began waiting.
    std::uint64_t mark = 0;
    bool acknowledged = false;
  };

  Trial* trial(const TrialId& id);
  std::uint32_t worker_index(const coordinator::WorkerId& worker);
  std::optional<std::string> apply(const OrchestrationRecord& record);
  std::optional<std::string> end_attempt(const TrialId& id, coordinator::Attempt attempt,
                                         coordinator::TrialStatus next, Instant at);

  std::optional<std::string> fair(const coordinator::JobId& leased, Instant at) const;

  std::map<coordinator::JobId, Job> jobs_;
  std::map<int, std::uint64_t> leases_;  // by priority, since the start
  std::map<int, std::uint64_t> jobs_of_priority_;
  std::vector<Trial> trials_;
  std::unordered_map<std::string, std::uint32_t> worker_ids_;
  std::vector<std::uint32_t> leases_held_;  // by worker index
  std::uint64_t ended_ = 0;
};

}  // namespace forktrial::simulation
