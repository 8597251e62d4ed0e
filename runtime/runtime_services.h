// What the runtime offers its Lua bindings (internal to the runtime): the
// only way the functions behind `forktrial`, `require`, `print`, `ctx.log`,
// `graph` and `rt` reach the Runtime. Runtime implements it privately and
// hands it to each pack (PackHost::runtime); the bindings never see the
// Runtime class itself (runtime/CMakeLists.txt compiles them so that
// including runtime/runtime.h fails), so the rest of its state stays private.
//
// The operations are called from Lua API functions, while load_pack or
// run_scenario runs. None raises a Lua error: expected failures are values,
// and the binding decides how to raise them. Only drain() runs Lua code (the
// behaviors, each in a protected call). C++ exceptions (std::bad_alloc, or
// one thrown by the log sink) pass to the calling binding's cxx_boundary.
//
// Not thread-safe: the thread that drives the Runtime calls these. The
// object lives as long as its Runtime, which outlives every Lua state of its
// packs. References returned stay valid until the next append or drain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "runtime/graph.h"
#include "runtime/graph_events.h"
#include "runtime/id_mint.h"
#include "store/event.h"
#include "store/ids.h"

namespace forktrial::runtime {

struct PackHost;

// What one behavior run did through its graph, as behavior.completed reports
// it (activegraph's BehaviorGraph counters).
struct BehaviorCounters {
  std::uint64_t objects_created = 0;
  std::uint64_t relations_created = 0;
  std::uint64_t patches_applied = 0;   // graph:patch_object
  std::uint64_t patches_proposed = 0;  // graph:propose_patch
  std::uint64_t events_emitted = 0;    // graph:emit
};

// Who is acting: a behavior being run, or the scenario (the candidate's pack,
// invocation 0). While a pack's entry file runs, and between calls, nobody
// acts for that pack: `pack` is another pack or null.
struct Origin {
  PackHost* pack = nullptr;
  std::uint64_t invocation = 0;  // one per behavior run; 0 = the scenario
  std::string actor;             // "<pack>.<behavior>" or "scenario": written events' default actor
  std::optional<store::EventId> caused_by;  // the event a behavior handles
  BehaviorCounters counters;                // what this behavior run did so far
};

class RuntimeServices {
 public:
  // ---- reads ---------------------------------------------------------------

  // The fork's run id (rt.run_id).
  virtual const store::RunId& run_id() const = 0;
  // The graph as projected so far.
  virtual const Graph& graph() const = 0;
  // The whole history, oldest first: the fork's events, then the new ones.
  virtual const std::vector<store::Event>& events() const = 0;
  // The parsed payload of events()[index]; `index` must be below its size.
  virtual const nlohmann::ordered_json& payload(std::size_t index) const = 0;
  // Who acts right now (see Origin).
  virtual const Origin& origin() const = 0;
  // Whether a pack of this name is loaded.
  virtual bool is_loaded_pack(std::string_view name) const = 0;
  // The provenance stamp of an event the current origin writes next with
  // `actor`: caused by what the origin handles, timestamped with the time
  // the next appended event gets.
  virtual Stamp stamp(std::string actor) const = 0;

  // ---- ids -----------------------------------------------------------------

  // The run's id counters (runtime/id_mint.h), seeded from the history. A
  // minted id is used up even when the append that needed it then fails.
  virtual IdMint& ids() = 0;
  // Counts a mutation of the running behavior (nothing for the scenario).
  virtual BehaviorCounters& counters() = 0;

  // ---- acting --------------------------------------------------------------

  // Why a call that writes events or dispatches them may not run any more,
  // as the end of a sentence ("memory ran out; the trial stops"); nullopt
  // while it may. Once set it stays set: memory ran out, the event sink
  // failed, the write budget or the event budget is exhausted (checked in
  // that order).
  virtual std::optional<std::string> refusal() const = 0;

  // Why a scenario may not dispatch events (rt:run_until_idle, rt:run_goal,
  // an empty scenario): a loaded pack has an LLM behavior and the trial has
  // no LLM provider (max_llm_calls = 0). activegraph's Runtime raises
  // MissingProviderError from the same entry points (_ensure_registry), so
  // the scenario fails rather than the load. nullopt when dispatch may run.
  virtual std::optional<std::string> missing_llm_provider() const = 0;

  // Appends one event on behalf of the current origin (caused by the event it
  // handles, if any) with `actor`: projected onto the graph, stamped with id
  // and time, handed to the sink, queued for dispatch. The error says why
  // nothing was appended: the graph refused the payload, the write budget ran
  // out (the runtime then stops), the sink failed now or before.
  virtual std::expected<store::EventId, Status> append_as_origin(
      const std::string& type, const nlohmann::ordered_json& payload, std::string actor) = 0;

  // Dispatches queued events until the queue is empty, the event budget runs
  // out or the runtime stops (see Runtime). The error, a phrase to follow the
  // caller's name, says why it did nothing (a drain is already running: a
  // behavior cannot start one) or why it stopped early (a behavior's where
  // filter raised, as activegraph's dispatch raises out of run_until_idle).
  virtual std::expected<void, Status> drain() = 0;

  // Writes one line "[<origin>] <message>" to the runtime's log sink, both
  // escaped and the message bounded (see LogSink in runtime/runtime.h).
  virtual void log_line(std::string_view origin, std::string_view message) = 0;

 protected:
  ~RuntimeServices() = default;
};

}  // namespace forktrial::runtime
