// The activegraph executor (docs/trials.md, "activegraph packs"): a trial
// whose candidate is an activegraph Python pack (pack/executor.h) runs in
// activegraph's own trial child, `python3 -m activegraph.sandbox._child`,
// under activegraph's semantics, and forktrial keeps its side of the
// contract: the pin, the scratch store, the nets, and the rule that the
// store, not the child, is the record.
//
// The child's contract, as activegraph's parent holds it
// (activegraph/sandbox/_child.py and __init__.py):
//   - one JSON job on stdin: store_path, fork_run_id, initial_events,
//     pack_root, expected_bundle_hash, manifest_required, extra_packs,
//     scenario, limits {max_rss_bytes, max_events, max_llm_calls,
//     cpu_seconds}; or {"preflight": true};
//   - a closed environment (PATH, HOME, LANG, the pass-through names) and a
//     computed PYTHONPATH, never the ambient one;
//   - one JSON line on stdout, the tail: {"outcome", "fork_run_id",
//     "events_appended", "behavior_failures", "detail"} (or {"preflight":
//     "ok"}); the last line that parses as an object with "outcome" counts;
//   - exit 0 completed, 30 scenario_failed, 40 limits_exceeded, 50
//     materialization_failed; anything else, and exit 0 without a tail, is
//     crashed;
//   - the wall clock kills the process group: limits_exceeded.
// forktrial is stricter where the contract leaves the child room to lie: a
// tail whose outcome disagrees with the exit code is crashed, as for the Lua
// child (sandbox/tail.h), and the delta read back from the scratch store
// (import/activegraph_scratch.h) is held to every rule of sandbox/delta.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "sandbox/spawn.h"
#include "sandbox/trial.h"
#include "sandbox/trial_types.h"

namespace forktrial::sandbox {

// Asks `python` (a path, or a name searched on PATH) where activegraph is,
// with the caller's own environment, as a user would run it: the child's
// PYTHONPATH is then the directory holding the activegraph package, followed
// by the interpreter's other sys.path entries that are directories
// (activegraph's parent computes the same). Refused (unavailable) when the
// interpreter cannot be run or activegraph does not import, with what it
// printed.
std::expected<ActivegraphInstall, Status> find_activegraph(
    const std::string& python = "python3",
    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The job activegraph's child reads on stdin, for a trial of `spec` whose
// fork `fork_id` is in the scratch store `store_path` with `initial_events`
// events. Pack roots are made absolute; pins are written "sha256:<hex>", or
// "" when unpinned; cpu_seconds is limits.max_cpu_seconds, or the wall
// clock rounded down plus 5 s (activegraph's parent's rule).
std::string activegraph_job(const std::filesystem::path& store_path, const store::RunId& fork_id,
                            std::uint64_t initial_events, const TrialSpecification& spec);

// How the child ended, as the parent reads it: the wall clock first, then
// the child's tail when its exit code agrees with it, else the exit code's
// outcome where activegraph's parent would take it without a tail, else
// crashed. The tail's counts become the verdict's claim, which the store's
// numbers overrule.
TrialVerdict activegraph_verdict(const ChildResult& child, const TrialLimits& limits);

// Runs `spec`'s trial in activegraph's child against a fork whose history
// is `segment` (as execute_trial takes it), through an SQLite scratch store;
// what the child appended is read back and held to the delta rules. A pinned
// pack whose directory does not hash to its pin is materialization_failed
// before any child starts, whatever the child would have checked. Throws
// as execute_trial does; a missing activegraph is a SandboxStartupError.
ExecutedTrial execute_activegraph_trial(std::span<const std::byte> segment,
                                        const TrialSpecification& spec, const store::RunId& fork_id,
                                        const ActivegraphInstall& install,
                                        const ChildOptions& options = {},
                                        const ParentRunContext& parent = {});

// The activegraph `options` names, or the one find_activegraph(options.python)
// finds (asked once per process and interpreter). Throws SandboxStartupError
// saying why when there is none.
ActivegraphInstall activegraph_install(const ChildOptions& options);

// Starts the child with {"preflight": true}: nothing when it answers
// {"preflight": "ok"} and exits 0, else why not (unavailable).
std::optional<Status> activegraph_preflight(
    const ActivegraphInstall& install,
    std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace forktrial::sandbox
