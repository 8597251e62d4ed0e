// run_trial and preflight: activegraph.sandbox's contract in C++.
//
// Division of authority: the parent (this code) forks the run in its store
// and records the lineage; a fresh `forktrial-child` process gets only a
// scratch store holding that fork and appends to it; afterwards the parent
// appends the child's delta to the fork in the authoritative store and
// re-reads the counts from there. The store is the record: its numbers win
// every disagreement with the child's tail, and the report says so.
//
// run_trial never throws for what happens inside a trial — those are
// outcomes in the TrialReport. It throws TrialSetupError, before anything is
// forked, spawned or recorded, for what the caller got wrong (a limit out of
// range, a malformed pin, an unknown run or fork point), SystemError or
// StoreError for a broken host or store, and Cancelled when
// ChildOptions::cancellation is cancelled before the child is done: the
// child's process group is then killed and reaped, the scratch directory
// removed, and nothing recorded. Thread-safe as long as each call has its own
// EventStore access (EventStore itself is thread-safe).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "sandbox/cancellation.h"
#include "sandbox/delta.h"
#include "sandbox/isolation.h"
#include "sandbox/job.h"
#include "sandbox/scratch.h"
#include "sandbox/trial_types.h"
#include "store/event_store.h"

namespace forktrial::sandbox {

// What the caller got wrong; nothing was forked, spawned or recorded. Its
// category is invalid_argument for an invalid specification and not_found
// for an unknown run or event, as the store's refusal of the same fact.
class TrialSetupError : public Error {
 public:
  enum class Kind {
    invalid_specification,  // a limit out of range, an empty field, a label that is not plain text
    unknown_run,            // the parent run is not in the store
    unknown_event,          // the fork point is not in the parent's history
  };
  TrialSetupError(Kind kind, const std::string& message)
      : Error(kind == Kind::invalid_specification ? ErrorCode::invalid_argument
                                                  : ErrorCode::not_found,
              message),
        kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A trial child could not start at all (category unavailable); the message
// carries its stderr tail.
class SandboxStartupError : public Error {
 public:
  explicit SandboxStartupError(const std::string& message)
      : Error(ErrorCode::unavailable, message) {}
};

// Where activegraph is, as the interpreter that runs it sees it
// (sandbox/activegraph_child.h find_activegraph).
struct ActivegraphInstall {
  std::filesystem::path python;          // the interpreter, an absolute path
  std::vector<std::string> python_path;  // the child's PYTHONPATH, in order
  std::string version;                   // activegraph.__version__ ("" when it has none)
};

// How the parent runs children. Defaults suit production; tests override.
struct ChildOptions {
  std::filesystem::path child_path;      // empty: default_child_path()
  std::filesystem::path scratch_parent;  // empty: $TMPDIR or /tmp
  std::vector<std::string> extra_env;    // "NAME=value" added to the child's env (tests)
  // Cancelling it stops the trial (run_trial and preflight throw Cancelled);
  // not owned, must outlive the call. Signal handlers may cancel it.
  const Cancellation* cancellation = nullptr;
  // Scratch directories are leased from this pool and given back reset
  // (sandbox/scratch.h) rather than made and removed for each trial; not
  // owned, must outlive the call. Lua trials under standard isolation only:
  // strict isolation and activegraph packs make a fresh directory each time.
  // Null: a fresh one for every trial.
  ScratchPool* scratch_pool = nullptr;
  // strict: namespaces, the seccomp filter and a cgroup (isolation.h); what
  // the host cannot apply is a warning in the report (and preflight's).
  Isolation isolation = Isolation::standard;
  // The activegraph executor's interpreter, for a candidate that is an
  // activegraph pack (pack/executor.h): `activegraph` when set, else where
  // find_activegraph(python) finds it (asked once per process).
  std::string python = "python3";
  std::optional<ActivegraphInstall> activegraph;
};

// Where the trial child is: $FORKTRIAL_CHILD when it is set; else
// forktrial-child beside the running executable (the build tree, or bin/ of
// an installation that keeps both there); else
// ../libexec/forktrial/forktrial-child from it (what `cmake --install` lays
// out). When none exists, the path beside the executable, so that the spawn's
// error names where the child was expected. No build-tree path is compiled
// in: an installed forktrial finds its own child.
std::filesystem::path default_child_path();

// Runs the trial `spec` describes: forks spec.parent_run_id at spec.at_event
// in `store`, runs the candidate in a fresh child, records the fork with what
// the parent accepts of its delta, and reports.
TrialReport run_trial(store::EventStore& store, const TrialSpecification& spec,
                      const ChildOptions& options = {});

// What a trial's executing side hands back when the authoritative store is
// elsewhere (a worker's, for the coordinator): how the child ended, and the
// events of its delta the parent accepts, oldest first. The side holding the
// store records them with record_trial and reports with report_from_store
// (sandbox/delta.h).
struct ExecutedTrial {
  TrialVerdict verdict;
  std::vector<store::NewEvent> events;
  std::uint64_t fork_seq = 0;  // the fork point's seq: the events in the segment
  // What ran the candidate, as TrialReport says it.
  std::string executor = "lua";
  std::string executor_version;
};

// Runs the trial `spec` describes against a fork whose history is `segment`
// (the canonical segment of the parent's history up to spec.at_event, as
// EventStore::segment writes it), in a fresh child with a scratch store, as
// the fork run `fork_id`. The pack directories of `spec` are local. Records
// nothing: the caller sends the result to the store's holder. Throws as
// run_trial does; a segment that cannot be loaded is a TrialSetupError.
// What a fork inherits from its parent run besides its history: activegraph's
// runs.goal and runs.frame_id, which activegraph's child finds on the fork's
// row (none: NULL there). A Lua trial does not read them.
struct ParentRunContext {
  std::optional<std::string> goal = std::nullopt;
  std::optional<std::string> frame_id = std::nullopt;
  friend bool operator==(const ParentRunContext&, const ParentRunContext&) = default;
};

ExecutedTrial execute_trial(std::span<const std::byte> segment, const TrialSpecification& spec,
                            const store::RunId& fork_id, const ChildOptions& options = {},
                            const ParentRunContext& parent = {});

// Probes with a representative memory cap (256 MiB) and the default wall clock.
TrialLimits default_preflight_limits();

// Starts a child with a null job that applies `limits` and starts the runtime.
// Returns the degradation warnings (empty when every net applied), or throws
// SandboxStartupError with the child's stderr tail when it cannot start, and
// TrialSetupError (before starting anything) for limits out of range.
std::vector<std::string> preflight(const TrialLimits& limits = default_preflight_limits(),
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                   const ChildOptions& options = {});

}  // namespace forktrial::sandbox
