// The in-process pack runtime: one fork's history, the packs loaded into it,
// the dispatch loop, and the scenario that drives it. The trial child creates
// exactly one Runtime per trial.
//
// Everything it produces is a deterministic function of (history, packs,
// scenario, config): event ids continue the run's "evt_NNN" counter, times
// come from a clock that starts at the fork tip and ticks one millisecond per
// event, and math.random is seeded from the trial id. Nothing reads the wall
// clock or real randomness. (Pack code that lets the order of `pairs` over a
// table's string keys, which Lua seeds per process, reach an event is the one
// exception; docs/pack-authoring.md tells authors to sort.)
// docs/runtime-semantics.md states every rule.
//
// Every new event is handed to the sink, in order, before the call that
// produced it returns, so the caller can append it to its store as it goes
// and a crash keeps the prefix. The sink must not call back into the runtime.
// If it throws, the runtime stops dispatching and the exception is rethrown
// from the load_pack or run_scenario call that was running.
//
// Expected failures are values: a pack that does not load is a LoadError, a
// scenario that fails or hits a net is a ScenarioResult. Not thread-safe: one
// thread drives a Runtime. References returned by accessors stay valid until
// the next non-const call.
//
// Its Lua bindings see it only as RuntimeServices
// (runtime/runtime_services.h), which it implements privately.
#pragma once

// Of the runtime library's own sources only runtime.cc sees this class: the
// rest, the Lua bindings first, is compiled with FORKTRIAL_BELOW_RUNTIME
// (runtime/CMakeLists.txt) and reaches the runtime through RuntimeServices
// alone. tests/runtime/layering_test.cc checks that this holds.
#ifdef FORKTRIAL_BELOW_RUNTIME
#error "Lua bindings reach the runtime through runtime/runtime_services.h, not runtime.h"
#endif

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/error.h"
#include "pack/pack_files.h"
#include "runtime/clock.h"
#include "runtime/graph.h"
#include "runtime/lua_host.h"
#include "runtime/runtime_services.h"
#include "schema/outcome.h"
#include "schema/records.h"
#include "store/event.h"
#include "store/ids.h"

namespace forktrial::runtime {

struct RuntimeConfig {
  store::RunId run_id;              // the fork's run id, visible to scenarios as rt.run_id
  std::string trial_id;             // seeds math.random
  std::uint64_t max_events = 2000;  // events dispatched before stopping; 0 = no budget
  std::uint64_t max_llm_calls =
      0;  // 0: no LLM provider exists; dispatch with an LLM behavior fails
  std::size_t lua_memory_cap_bytes = 0;  // shared by all Lua states; 0 = no cap
  // The write budget: events, and bytes of their text fields
  // (store::event_text_bytes), the runtime may append; 0 = no budget. An
  // event that would go past it is not written; the runtime writes one
  // closing runtime.budget_exhausted record instead (beyond the budget, at
  // most kClosingRecordBytes) and stops.
  std::uint64_t max_appended_events = 0;
  std::uint64_t max_appended_bytes = 0;
};

// What the write budget's closing record may add beyond the budget.
using schema::kClosingRecordBytes;
using schema::kClosingRecords;

// Called once per new event, in order.
using EventSink = std::function<void(const store::NewEvent&)>;
// Receives one line per ctx.log or print call: "[<origin>] <text>", origin and
// text with control characters and invalid UTF-8 rendered visibly (\n, \x1b,
// \u{9b}: base/text.h escape_controls), so a call can never produce a line
// that starts with anything else; the text is cut to kMaxLogLineBytes with a
// marker saying how much was cut. The default writes each line to stdout.
using LogSink = std::function<void(std::string_view line)>;

// Bounds on text a candidate controls, each cut with a marker saying how much
// was left out (base/text.h bounded_text): the message and the traceback of a
// behavior.failed event (also made valid UTF-8), and the text of a log line.
inline constexpr std::size_t kMaxErrorTextBytes = 64 << 10;
inline constexpr std::size_t kMaxLogLineBytes = 16 << 10;

enum class PackRole {
  extra,      // trusted packs loaded first, in order
  candidate,  // the pack under trial, loaded last; scenarios resolve in its root
};

// A Status whose message is "cannot load the pack at DIR:" followed by one
// problem per line: resource_exhausted when memory ran out, invalid_argument
// otherwise.
struct LoadError : Status {
  std::filesystem::path pack_dir;
  std::vector<std::string> problems;  // every problem found, each a complete sentence
  bool memory_cap_hit = false;        // memory ran out (see Runtime::memory_cap_hit)

  LoadError(std::filesystem::path dir, std::vector<std::string> found, bool out_of_memory);
};

struct LoadedPack {
  std::string name;
  std::string version;
  store::EventId loaded_event;  // the pack.loaded event
};

// How a scenario ended. The runtime ends scenarios as completed,
// scenario_failed (it raised, or could not be found: message says which) or
// limits_exceeded by the event budget (max_events ran out), the write budget
// (max_appended_events or _bytes ran out) or memory (the Lua cap, C++ memory
// on Lua's behalf, the limits of a JSON conversion or the C-stack guard of
// LuaHost: message says which). Both budgets leave runtime.budget_exhausted in
// the history.
struct ScenarioResult {
  Outcome outcome = Outcome::completed;
  Net net = Net::none;                // set when outcome is limits_exceeded
  std::string message;                // empty when completed
  std::string traceback;              // for scenario_failed raised by Lua
  std::uint64_t events_appended = 0;  // new events since the fork point, all kinds
  std::uint64_t behavior_failures = 0;
};

struct PackHost;  // one loaded pack and its Lua state (runtime/pack_host.h)

class Runtime final : private RuntimeServices {
 public:
  // `history` is the fork's history, oldest first (inherited and own events,
  // with their seq). It is projected into the graph; an event that cannot be
  // projected (bad payload, unknown reference) or a tip timestamp that cannot
  // be parsed is an error naming the event.
  static std::expected<std::unique_ptr<Runtime>, Status> create(RuntimeConfig config,
                                                                std::vector<store::Event> history,
                                                                EventSink sink, LogSink log = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Loads a pack from its hashed bytes: validated manifest with a [runtime]
  // entry, the entry run in a fresh confined state, the two-way surface
  // check, and a name conflict check against the packs already
  // loaded. On success emits pack.loaded. Extra packs must be loaded before
  // the candidate, and only one candidate can be loaded. Every file the pack
  // runs later (modules for `require`, the candidate's scenario) comes from
  // `files` too: the runtime never reads the pack directory.
  std::expected<LoadedPack, LoadError> load_pack(pack::PackFiles files, PackRole role);
  // Reads the pack in `dir` (pack::PackFiles::read; walk violations are load
  // problems), then loads it as above.
  std::expected<LoadedPack, LoadError> load_pack(const std::filesystem::path& dir, PackRole role);

  // Runs "path.lua", "path.lua::fn" (default fn "main") from the candidate's
  // root as fn(rt); "" runs until idle.
  ScenarioResult run_scenario(std::string_view spec);

  const Graph& graph() const override { return graph_; }
  // The whole history: the fork's events, then the new ones.
  const std::vector<store::Event>& events() const override { return events_; }
  std::uint64_t events_appended() const { return events_.size() - history_size_; }
  std::uint64_t behavior_failures() const { return behavior_failures_; }
  bool budget_exhausted() const { return budget_exhausted_; }
  bool write_budget_exhausted() const { return write_budget_exhausted_; }
  // Memory ran out for real (the Lua cap, or memory outside it; see
  // LuaHost): sticky, however the Lua code reacted.
  bool memory_cap_hit() const { return host_.memory_exhausted(); }
  const RuntimeConfig& config() const { return config_; }

 private:
  // How a drain ended; `failed` when a behavior's where filter raised, as
  // Python raises comparing what it cannot (the error is dispatch_error_).
  enum class Drain { idle, budget_exhausted, stopped, failed };

  Runtime(RuntimeConfig config, EventSink sink, LogSink log);

  // Appends one event: projects it (a projection error appends nothing),
  // stamps id and time, hands it to the sink, queues it unless it is a
  // behavior.* or runtime.* event.
  std::expected<store::EventId, Status> append(const std::string& type,
                                               const nlohmann::ordered_json& payload,
                                               std::optional<std::string> actor,
                                               std::optional<store::EventId> caused_by);
  store::EventId next_event_id();
  // Queues the history's events that were still waiting when it was
  // recorded (see docs/runtime-semantics.md, Dispatch).
  void requeue_unfired();
  // activegraph's Budget.remaining() for max_events: used < max.
  bool budget_remaining() const;
  // activegraph's Budget.snapshot(): {used, limits, cost_used_usd, cost_limit_usd}.
  nlohmann::ordered_json budget_snapshot() const;
  Drain run_until_idle();
  void run_behavior(PackHost& pack, std::size_t behavior, std::size_t event_index);
  // Memory ran out, the write budget ran out or the sink failed: no more Lua
  // code runs (LuaHost).
  bool stopped() const { return host_.stopped(); }
  // Whether appending `bytes` more would go past the write budget; if so,
  // records the exhaustion (the closing record) and stops the runtime.
  bool refuse_over_write_budget(std::uint64_t bytes);
  // "the write budget (max_appended_events = N, ...) is exhausted; the trial stops"
  std::string write_budget_exhausted_message() const;
  // "the event budget (max_events = N) is exhausted; the trial stops"
  std::string event_budget_exhausted_message() const;

  // RuntimeServices, for the Lua bindings (graph() and events() are public).
  const store::RunId& run_id() const override { return config_.run_id; }
  const nlohmann::ordered_json& payload(std::size_t index) const override {
    return payloads_[index];
  }
  const Origin& origin() const override { return origin_; }
  Stamp stamp(std::string actor) const override;
  bool is_loaded_pack(std::string_view name) const override;
  IdMint& ids() override { return ids_; }
  BehaviorCounters& counters() override { return origin_.counters; }
  std::optional<std::string> refusal() const override;
  std::optional<std::string> missing_llm_provider() const override;
  std::expected<store::EventId, Status> append_as_origin(const std::string& type,
                                                         const nlohmann::ordered_json& payload,
                                                         std::string actor) override;
  std::expected<void, Status> drain() override;
  void log_line(std::string_view origin, std::string_view message) override;

  RuntimeConfig config_;
  EventSink sink_;
  LogSink log_;
  LuaHost host_;  // before packs_: every pack's state is closed before it

  std::vector<store::Event> events_;
  std::vector<nlohmann::ordered_json> payloads_;  // events_[i].payload, parsed
  std::size_t history_size_ = 0;
  std::unordered_set<std::string> used_event_ids_;
  IdMint ids_;
  std::uint64_t next_seq_ = 1;
  TickingClock clock_{0};
  Graph graph_;

  std::vector<std::unique_ptr<PackHost>> packs_;  // in load order; the candidate last
  bool candidate_loaded_ = false;
  struct Subscription {
    PackHost* pack;
    std::size_t behavior;
  };
  std::vector<Subscription> subscriptions_;  // registration order

  std::deque<std::size_t> queue_;     // indices into events_, FIFO
  std::uint64_t dispatched_ = 0;      // events popped: the budget's used max_events
  std::uint64_t behavior_calls_ = 0;  // behavior runs: used max_behavior_calls
  bool idle_emitted_ = false;         // the last drain's idle record stands
  bool budget_exhausted_ = false;
  std::string dispatch_error_;  // why the last drain failed
  bool write_budget_exhausted_ = false;
  std::uint64_t appended_bytes_ = 0;  // what the write budget counts so far
  bool draining_ = false;
  std::exception_ptr sink_failure_;
  std::uint64_t behavior_failures_ = 0;
  std::uint64_t next_invocation_ = 1;
  Origin origin_;  // who acts right now
};

}  // namespace forktrial::runtime
