// The values of a trial, mirroring activegraph.sandbox: where the packs come
// from (PackSource), the nets (TrialLimits), what a trial produced
// (TrialReport), and the versioned, canonical-JSON TrialSpecification that
// carries one trial across a process or network boundary.
//
// Plain values: copyable, no hidden state, safe to share between threads.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "sandbox/isolation.h"
#include "schema/outcome.h"
#include "store/ids.h"

namespace forktrial::sandbox {

// Where a pack is materialized from. `expected_bundle_hash` is the external
// pin (the §4 walk with manifest.toml), a parsed digest, so a malformed pin
// never gets this far; the child verifies it against the bytes it runs.
// `manifest_required` additionally validates the manifest and checks the
// registered surface against it two-way.
struct PackSource {
  std::string root_dir;
  std::optional<Digest> expected_bundle_hash;
  bool manifest_required = true;
  friend bool operator==(const PackSource&, const PackSource&) = default;
};

// The trial's resource nets. Zero (or nullopt) disables a net.
struct TrialLimits {
  static constexpr std::uint64_t kDefaultMaxRssBytes = std::uint64_t{1} << 30;  // 1 GiB
  static constexpr std::uint64_t kDefaultMaxAppendedEvents = 100'000;
  static constexpr std::uint64_t kDefaultMaxAppendedBytes = std::uint64_t{64} << 20;  // 64 MiB

  double wall_clock_seconds = 120;
  // RLIMIT_AS and the Lua allocator cap (half of it). On by default: a trial
  // without a memory net is announced in its warnings.
  std::optional<std::uint64_t> max_rss_bytes = kDefaultMaxRssBytes;
  std::uint64_t max_events = 2000;  // events dispatched (the runtime's budget)
  std::uint64_t max_llm_calls = 0;
  // RLIMIT_CPU; nullopt means the wall clock rounded up plus 5 s, so the CPU
  // net only fires for a child the wall-clock kill did not stop.
  std::optional<std::uint64_t> max_cpu_seconds;
  // The write budget: events and bytes the trial may append to its fork
  // (every event it writes, whatever wrote it). The parent never records more.
  std::uint64_t max_appended_events = kDefaultMaxAppendedEvents;
  std::uint64_t max_appended_bytes = kDefaultMaxAppendedBytes;
  std::vector<std::string> env_passthrough;  // names forwarded beyond PATH, HOME, LANG
  friend bool operator==(const TrialLimits&, const TrialLimits&) = default;
};

// The ranges a limit must fall in, so that no value disables a net by
// accident (a wall clock of 1e-9 s rounds to none, 1e300 s overflows).
inline constexpr double kMinWallClockSeconds = 0.001;
inline constexpr double kMaxWallClockSeconds = 7 * 24 * 3600;
// The memory cap: any positive cap up to 1 TiB, as activegraph takes any
// (its child fails, limits_exceeded, under one too small to start); forktrial's
// Lua child needs 64 MiB (lua_limits_problem), checked where the candidate's
// executor is known.
inline constexpr std::uint64_t kMinMaxRssBytes = std::uint64_t{64} << 20;
inline constexpr std::uint64_t kMaxMaxRssBytes = std::uint64_t{1} << 40;

// Every problem with the values of `limits`, each naming its field
// ("limits.wall_clock_seconds: ..."); empty when they are all in range.
std::vector<std::string> check_trial_limits(const TrialLimits& limits);

// What forktrial's Lua child cannot run under (a memory cap below
// kMinMaxRssBytes), naming the field; nothing when it can.
std::optional<std::string> lua_limits_problem(const TrialLimits& limits);

// The child's exit code for each outcome (schema/outcome.h); anything else,
// or a signal, is `crashed`.
int exit_code_of(Outcome outcome);  // 0, 30, 40, 50; -1 for crashed
Outcome outcome_of_exit_code(int code);

// What a trial produced. `events_appended` and both failure counts are re-read
// from the fork in the store after the child exits; the child's own claim is a
// signal only. `behavior_failures` counts as activegraph does (its
// `len(trace.failures())` on the fork): every behavior.failed in the fork's
// whole history, the inherited prefix included; `behavior_failures_after_fork`
// counts only those the trial itself appended.
struct TrialReport {
  Outcome outcome = Outcome::crashed;
  TrialIsolation isolation;  // the level and each net, as they held for this trial
  std::string fork_run_id;
  std::uint64_t events_appended = 0;
  std::uint64_t behavior_failures = 0;             // the fork's whole history
  std::uint64_t behavior_failures_after_fork = 0;  // appended by the trial
  std::string detail;
  int exit_code = 0;                  // the child's exit status, or -signal for a signal death
  std::vector<std::string> warnings;  // degraded nets, also folded into detail
  // What ran the candidate (pack/executor.h): "lua" (forktrial's child), or
  // "activegraph" with the activegraph version it ran under.
  std::string executor = "lua";
  std::string executor_version;
  // Which net stopped a limits_exceeded trial (TrialVerdict::net).
  Net net = Net::none;
};

// The isolation a trial run at `level` under `limits` had, read from the
// warnings its run raised: a net is degraded when a warning its producer
// writes names it (rlimits.cc, spawn.cc, confine.cc, trial.cc each start
// theirs with the net's name), off when the limits or the level do not ask
// for it, applied otherwise. The nets, in order: process, memory, cpu,
// wall_clock, write_budget, environment, then strict's namespaces,
// filesystem, seccomp, cgroup, privileges (off under standard).
// `executor` is what ran the candidate ("lua" or "activegraph"): the memory
// and file-system nets differ in what provides them.
TrialIsolation trial_isolation(Isolation level, const TrialLimits& limits,
                               const std::vector<std::string>& warnings,
                               std::string_view executor = "lua");

// `isolation` as a JSON object: {"level": "strict", "nets": [{"name":
// "memory", "state": "applied", "detail": "..."}, ...]}; what `forktrial
// trial --json` prints and a cluster result holds.
std::string isolation_json(const TrialIsolation& isolation);

// One trial, as handed to an executor. Serialized as canonical JSON (sorted
// keys, no insignificant whitespace): the same specification always gives the
// same bytes, so its digest can key caches.
struct TrialSpecification {
  static constexpr int kSchemaVersion = 1;
  store::RunId parent_run_id;
  store::EventId at_event;
  std::string label = "trial";
  PackSource candidate;
  std::vector<PackSource> extra_packs;
  std::string scenario;  // "path.lua" or "path.lua::fn" inside the candidate; "" = run until idle
  TrialLimits limits;
  // activegraph's `store_path`, kept when a specification activegraph wrote
  // is parsed. forktrial never reads it (a trial runs against the store it is
  // handed; activegraph's store is a SQLite file, imported with `run
  // import-sqlite`) and to_canonical_json does not write it.
  std::optional<std::string> store_path;
  friend bool operator==(const TrialSpecification&, const TrialSpecification&) = default;
};

// The packs of a trial in the order the child loads them: the extra packs as
// given, then the candidate last. Pointers into `spec`.
std::vector<const PackSource*> packs_in_load_order(const TrialSpecification& spec);

std::string to_canonical_json(const TrialSpecification& spec);
std::string to_canonical_json(const TrialLimits& limits);

// Every problem with the values of `spec` (its limits, its pins, required
// fields), each naming its field; empty when the specification can run.
std::vector<std::string> check_trial_specification(const TrialSpecification& spec);

// Parses and validates limits alone (fields named "limits.<name>").
std::expected<TrialLimits, Problems> parse_trial_limits(std::string_view json);

// Parses and validates; every problem is reported at once, each naming its
// field ("limits.max_events: must be a non-negative integer, got a string").
// Reads forktrial's form and activegraph's (executor.py TrialSpecification):
// the candidate as `candidate` or `pack_source` (exactly one), an optional
// `store_path` (kept in `store_path`, unused), a pin of "" or null meaning
// unpinned, and null for `limits.max_events` or `limits.max_llm_calls`
// meaning 0. Unknown fields are refused in both.
std::expected<TrialSpecification, Problems> parse_trial_specification(std::string_view json);

}  // namespace forktrial::sandbox
