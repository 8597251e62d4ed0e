// Recording a trial, in two halves that may run on two machines. The side
// that ran the child decides how it ended (a TrialVerdict) and which of its
// events to keep (the accepted delta); the side that holds the authoritative
// store records them in one transaction (record_trial) and reports the
// numbers the store holds (report_from_store). On one machine run_trial does
// both; on a cluster the worker does the first and the coordinator the
// second, so the coordinator never runs a child and never links the runtime.
//
// Pure functions over the store's Writer and Snapshot; thread-safe as the
// store is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/timestamp.h"
#include "sandbox/trial_types.h"
#include "store/event_store.h"

namespace forktrial::sandbox {

// How a trial child ended, as the side that supervised it saw it.
struct TrialVerdict {
  Outcome outcome = Outcome::crashed;
  std::string detail;
  std::vector<std::string> warnings;
  int exit_code = 0;  // the child's exit status, or -signal
  // The wall clock or the CPU net stopped the child: that outcome stands
  // even if the store later refuses the delta.
  bool stopped_by_net = false;
  bool wall_clock_killed = false;  // the parent records trial.wall_clock_exhausted
  // Which net stopped a limits_exceeded trial: the parent's (wall clock, CPU,
  // write budget, the cgroup's memory), or the one the child's agreeing tail
  // names; none otherwise, or when it is not known (the cgroup's task limit).
  Net net = Net::none;
  // The child's own claim about what it appended after the fork point (its
  // tail), when it made one and its delta was accepted whole: compared with
  // what the store holds, which wins.
  std::optional<std::uint64_t> claimed_events;
  std::optional<std::uint64_t> claimed_failures;
  friend bool operator==(const TrialVerdict&, const TrialVerdict&) = default;
};

// The most a verdict's detail and warnings hold, wherever it was decided:
// the child tail's bounds (sandbox/tail.h) with room for the parent's own
// lines (the child's stderr, a cut). A worker's report is held to them too.
inline constexpr std::size_t kMaxVerdictDetailBytes = std::size_t{272} << 10;
inline constexpr std::size_t kMaxVerdictWarnings = 64;
inline constexpr std::size_t kMaxVerdictWarningBytes = std::size_t{4} << 10;

// Calls `visit` with each event of a delta, oldest first, until it returns
// false or the delta ends.
using EventVisitor = std::function<bool(const store::EventView&)>;
using DeltaSource = std::function<void(const EventVisitor&)>;

// A DeltaSource over events held in memory.
DeltaSource delta_of(const std::vector<store::NewEvent>& events);

// Why the rules cut a delta before one of its events.
struct DeltaCut {
  std::string reason;        // names the event, the rule and what was recorded
  bool over_budget = false;  // the write budget's rule: limits_exceeded, not a forgery
};

// The rules every trial delta is held to before anything of it is recorded,
// one implementation for both places a delta arrives from another process:
// a child's scratch store (the local parent, run_trial) and a worker's
// report (the coordinator). Fed the delta's events in order; the first event
// that breaks a rule cuts the delta there. The rules, in the order checked:
//   - parent records: types trial.* and forktrial.*, actors forktrial*, are
//     written by the parent alone;
//   - runtime records: pack.loaded, behavior.* and runtime.* are the
//     runtime's, with actor "runtime", and the actor "runtime" writes
//     nothing else; a behavior.* record names its behavior and, as
//     event_id, the event it was caused by, as the runtime writes it;
//   - the store's rules (store::event_problem: text fields, nesting);
//   - the payload is one JSON object, as the importers require
//     (store/json_text.h payload_problem: no truncated JSON, NaN, repeated
//     key or array);
//   - continuity (continuity_problem), from the fork point's timestamp on;
//   - the write budget: limits.max_appended_events and
//     limits.max_appended_bytes, plus the runtime's one closing record.
// Not thread-safe; one per delta.
class DeltaRules {
 public:
  // `whose`: the delta's author as the reasons name it ("the child",
  // "worker w1"); `tip`: the fork point's timestamp.
  DeltaRules(std::string whose, UnixMillis tip, const TrialLimits& limits);

  // nullopt when `event`, the delta's next, is accepted; else why the delta
  // is cut before it. After a cut, every later event is refused with it.
  const std::optional<DeltaCut>& check(const store::EventView& event);

  std::uint64_t accepted() const { return accepted_; }
  const std::optional<DeltaCut>& cut() const { return cut_; }

 private:
  std::optional<std::string> broken_rule(const store::EventView& event, const std::string& which);

  std::string whose_;
  UnixMillis last_;
  std::uint64_t limit_events_;  // the budget as the limits give it (0: none)
  std::uint64_t limit_bytes_;
  std::uint64_t max_events_;  // what is accepted: the budget and the closing record
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;
  std::uint64_t accepted_ = 0;
  std::optional<DeltaCut> cut_;
};

// Why `event` cannot follow an event stamped `previous_ms` (Unix ms) in a
// fork: its timestamp is not ISO-8601 UTC, or it is earlier, to the second,
// than the one before it (the runtime's clock never goes backwards; it writes
// whole seconds, so only the second is compared). nullopt when it can.
std::optional<std::string> continuity_problem(std::int64_t previous_ms,
                                              const store::EventView& event);

// In the caller's write transaction: forks spec.parent_run_id at
// spec.at_event as `fork`, appends the first `count` events of `delta` after
// checking that each continues the fork (continuity_problem, from the fork
// point on), and, when the verdict says the wall clock killed the child, the
// parent's trial.wall_clock_exhausted record. Returns the fork's head. A
// refusal writes nothing (the caller's transaction aborts). A caller that
// records many trials of one fork point (the coordinator) passes the fork
// point's time, read once; it is read from the parent's event otherwise.
store::Result<std::uint64_t> record_trial(store::Writer& writer, const TrialSpecification& spec,
                                          const store::NewRun& fork, std::uint64_t count,
                                          const DeltaSource& delta, const TrialVerdict& verdict,
                                          std::optional<UnixMillis> fork_point_time = std::nullopt);

// The verdict after the store refused the delta (`why`): the trial is
// recorded without it, and unless a net stopped the child, it crashed.
TrialVerdict without_delta(TrialVerdict verdict, const std::string& why);

// The line saying that the child's claim (the verdict's) disagrees with what
// the store holds for the fork (events appended after the fork point, the
// parent's wall-clock record included, and behavior.failed among them), or
// "" when it agrees or there is no claim.
std::string claim_disagreement(const TrialVerdict& verdict, std::uint64_t events_appended,
                               std::uint64_t failures_after_fork);

// The report, its numbers read from the recorded fork (the store is the
// record), the verdict's outcome and detail, and a line saying when the
// child's claim disagreed with the store.
TrialReport report_from_store(const store::Snapshot& snapshot, const store::RunId& fork,
                              std::uint64_t fork_seq, const TrialVerdict& verdict);

// Appends `line` to `detail` on a line of its own (nothing for an empty line).
void append_detail_line(std::string& detail, const std::string& line);

}  // namespace forktrial::sandbox
