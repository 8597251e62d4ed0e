// The event types and actors only forktrial writes, which a candidate may
// therefore never emit: its records would be indistinguishable from the
// runtime's or the trial parent's. docs/pack-authoring.md ("What a pack may
// emit") states the same rules for authors.
//
// Reserved event types:
//   - written by the runtime: "pack.loaded", "behavior.*", "runtime.*" and
//     the seven graph types (which change the graph only through its methods);
//   - written by the trial's parent process: "trial.*" (e.g.
//     trial.wall_clock_exhausted);
//   - "forktrial.*", kept for forktrial's own records.
// Reserved actors:
//   - "runtime" (pack.loaded, behavior.failed, runtime.*), "scenario"
//     (the scenario's default actor) and "system" (the actor of the
//     scenario's graph changes), the last two only the scenario may use;
//   - anything starting with "forktrial" (e.g. "forktrial.parent");
//   - "<pack>/<behavior>" (any actor with a '/') naming a pack other than
//     the one emitting, and "<pack>.<behavior>" (the canonical name behaviors
//     act as) naming another loaded pack.
//
// The trial's parent writes its records (trial.wall_clock_exhausted) with
// actor "forktrial.parent": is_parent_type and is_forktrial_actor recognise
// them wherever they must not come from a child.
//
// Pure functions; thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "schema/records.h"

namespace forktrial::runtime {

using schema::is_forktrial_actor;
using schema::is_forktrial_type;
using schema::is_parent_type;

inline constexpr const char* kRuntimeActor = "runtime";
static_assert(schema::kRuntimeActor == kRuntimeActor);
inline constexpr const char* kScenarioActor = "scenario";
// The actor of goal.created from rt:run_goal, as activegraph's run_goal has it.
inline constexpr const char* kUserActor = "user";
// The actor of graph changes a scenario makes: activegraph's graph builders
// (add_object, patch_object, ...) default to it.
inline constexpr const char* kSystemActor = "system";

// pack.loaded, behavior.*, runtime.* and the graph's types.
bool is_runtime_type(std::string_view type);

// Why a pack may not emit an event of `type`, as a sentence naming the type;
// nullopt when it may.
std::optional<std::string> reserved_type(std::string_view type);

// Why `emitter` — the scenario (`pack` is the candidate, `scenario` true) or
// a behavior of `pack` — may not name `actor` explicitly; nullopt when it
// may.
// `is_pack` says whether a name is a loaded pack's: "<pack>.<behavior>" is
// reserved only for loaded packs, since dotted actors ("trial.replay") are
// ordinary otherwise.
std::optional<std::string> reserved_actor(
    std::string_view actor, std::string_view pack, bool scenario,
    const std::function<bool(std::string_view)>& is_pack = {});

}  // namespace forktrial::runtime
