#include "runtime/runtime.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <lua.hpp>
#include <stdexcept>

#include "base/text.h"
#include "pack/pack_check.h"
#include "pack/scenario.h"
#include "runtime/lua_api.h"
#include "runtime/lua_event.h"
#include "runtime/lua_graph.h"
#include "runtime/lua_pack.h"
#include "runtime/lua_rt.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "runtime/surface_check.h"
#include "runtime/where.h"
#include "store/payload.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

namespace {

// Records about the loop, and the runtime's own bookkeeping, are not work
// for it: activegraph keeps these prefixes, and context.read, out of its
// queue (Runtime._on_event).
bool is_dispatched(std::string_view type) {
  for (std::string_view prefix : {"behavior.", "relation_behavior.", "runtime.", "llm.", "tool.",
                                  "pattern.", "approval.", "dev.", "authority."}) {
    if (type.starts_with(prefix)) return false;
  }
  return type != "context.read";
}

// What activegraph's _requeue_unfired skips: lifecycle records and
// context.read. (It re-queues llm.*, tool.* and the other records live
// dispatch never queues; so does forktrial, to load a fork as it does.)
bool is_lifecycle(std::string_view type) {
  return type.starts_with("behavior.") || type.starts_with("relation_behavior.") ||
         type.starts_with("runtime.") || type == "context.read";
}

// activegraph's Runtime._maybe_object_id: payload.object.id, when there is one.
json triggering_object_id(const json& payload) {
  if (!payload.is_object()) return nullptr;
  const auto object = payload.find("object");
  if (object == payload.end() || !object->is_object()) return nullptr;
  const auto id = object->find("id");
  return id == object->end() ? json(nullptr) : *id;
}

std::vector<std::string> canonical_names(const std::string& pack,
                                         const std::vector<std::string>& names) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& name : names) out.push_back(pack + "." + name);
  return out;
}

// pack.loaded's capabilities, as activegraph's loader records them: four keys
// (a manifest's action_class is not among them).
json capabilities_json(const std::vector<pack::Capability>& capabilities) {
  json out = json::array();
  for (const auto& capability : capabilities) {
    out.push_back({{"provider", capability.provider},
                   {"capability", capability.capability},
                   {"risk_class", capability.risk_class},
                   {"credential_ref", capability.credential_ref}});
  }
  return out;
}

std::string with_traceback(const LuaFailure& failure) {
  return failure.traceback.empty() ? failure.message : failure.message + "\n" + failure.traceback;
}

}  // namespace

LoadError::LoadError(std::filesystem::path dir, std::vector<std::string> found, bool out_of_memory)
    : Status{out_of_memory ? ErrorCode::resource_exhausted : ErrorCode::invalid_argument, ""},
      pack_dir(std::move(dir)),
      problems(std::move(found)),
      memory_cap_hit(out_of_memory) {
  message = "cannot load the pack at " + pack_dir.string() + ":";
  for (const auto& problem : problems) message += "\n  - " + problem;
}

Runtime::Runtime(RuntimeConfig config, EventSink sink, LogSink log)
    : config_(std::move(config)),
      sink_(std::move(sink)),
      log_(std::move(log)),
      host_(config_.lua_memory_cap_bytes, [this](std::string_view origin, std::string_view line) {
        log_line(origin, "warning: " + std::string(line));
      }) {
  // Candidate output goes to stdout, leaving stderr to the host's own
  // diagnostics (forktrial-child's).
  if (!log_) log_ = [](std::string_view line) { std::cout << line << '\n' << std::flush; };
}

Runtime::~Runtime() = default;

std::expected<std::unique_ptr<Runtime>, Status> Runtime::create(RuntimeConfig config,
                                                                std::vector<store::Event> history,
                                                                EventSink sink, LogSink log) {
  std::unique_ptr<Runtime> rt(new Runtime(std::move(config), std::move(sink), std::move(log)));
  if (!history.empty()) {
    auto start = parse_timestamp(history.back().timestamp);
    if (!start) {
      return failure(ErrorCode::invalid_argument,
                     "the fork tip " + history.back().id.str() +
                         " has a bad timestamp: " + start.error().message);
    }
    rt->clock_ = TickingClock(*start);
  }
  rt->payloads_.reserve(history.size());
  for (const auto& event : history) {
    const std::string where = "event " + event.id.str() + " (" + event.type + ", seq " +
                              std::to_string(event.seq) + ") of the fork's history";
    if (auto deep = store::payload_depth_problem(event.payload)) {
      return failure(ErrorCode::invalid_argument,
                     where + " cannot be projected: its payload is " + *deep);
    }
    json payload = json::parse(event.payload, nullptr, false);
    if (payload.is_discarded())
      return failure(ErrorCode::invalid_argument, where + " has a payload that is not JSON");
    if (auto applied = rt->graph_.apply(event.type, payload); !applied) {
      return failure(ErrorCode::invalid_argument,
                     "cannot project " + where + ": " + applied.error().message);
    }
    rt->used_event_ids_.insert(event.id.str());
    rt->ids_.note(event.id.str(), event.type, payload);
    rt->payloads_.push_back(std::move(payload));
  }
  const std::uint64_t last_seq =
      history.empty() ? 0 : std::max<std::uint64_t>(history.back().seq, history.size());
  rt->next_seq_ = last_seq + 1;
  rt->history_size_ = history.size();
  rt->events_ = std::move(history);
  rt->requeue_unfired();
  rt->origin_.actor = kScenarioActor;
  return rt;
}

void Runtime::requeue_unfired() {
  // Everything up to the last runtime.idle was drained; after it, an event
  // that no behavior.* record names was still queued when the run stopped
  // (activegraph's _requeue_unfired, the rule its trial child loads forks by).
  std::size_t first = 0;
  for (std::size_t i = 0; i < events_.size(); ++i) {
    if (events_[i].type == "runtime.idle") first = i + 1;
  }
  std::unordered_set<std::string> fired_on;
  for (std::size_t i = first; i < events_.size(); ++i) {
    const auto& type = events_[i].type;
    if (!type.starts_with("behavior.") && !type.starts_with("relation_behavior.")) continue;
    const json& payload = payloads_[i];
    if (!payload.is_object()) continue;
    const auto id = payload.find("event_id");
    if (id != payload.end() && id->is_string() && !id->get_ref<const std::string&>().empty()) {
      fired_on.insert(id->get<std::string>());
    }
  }
  for (std::size_t i = first; i < events_.size(); ++i) {
    const auto& event = events_[i];
    if (is_lifecycle(event.type) || fired_on.contains(event.id.str())) continue;
    if (event.actor && event.actor->starts_with("promote:")) continue;
    queue_.push_back(i);
  }
  if (!queue_.empty()) idle_emitted_ = false;
}

store::EventId Runtime::next_event_id() {
  for (;;) {
    auto number = ids_.next_event_number();
    if (!number) throw std::overflow_error(number.error().message);
    store::EventId id = store::numbered_event_id(*number);
    if (used_event_ids_.insert(id.str()).second) return id;
  }
}

Stamp Runtime::stamp(std::string actor) const {
  return Stamp{
      std::move(actor),
      origin_.caused_by ? std::optional<std::string>(origin_.caused_by->str()) : std::nullopt,
      clock_.peek(), config_.run_id.str()};
}

bool Runtime::is_loaded_pack(std::string_view name) const {
  for (const auto& pack : packs_) {
    if (pack->name == name) return true;
  }
  return false;
}

bool Runtime::budget_remaining() const {
  return config_.max_events == 0 || dispatched_ < config_.max_events;
}

json Runtime::budget_snapshot() const {
  const auto limit = [](std::uint64_t value) {
    return value == 0 ? json(nullptr) : json(static_cast<double>(value));
  };
  json used = json::object();
  json limits = json::object();
  for (const char* dimension :
       {"max_events", "max_behavior_calls", "max_llm_calls", "max_tool_calls", "max_patches",
        "max_depth", "max_seconds", "max_cost_usd"}) {
    used[dimension] = 0.0;
    limits[dimension] = nullptr;
  }
  used["max_events"] = static_cast<double>(dispatched_);
  used["max_behavior_calls"] = static_cast<double>(behavior_calls_);
  limits["max_events"] = limit(config_.max_events);
  limits["max_llm_calls"] = limit(config_.max_llm_calls);
  return {{"used", std::move(used)},
          {"limits", std::move(limits)},
          {"cost_used_usd", "0"},
          {"cost_limit_usd", nullptr}};
}

std::expected<store::EventId, Status> Runtime::append(const std::string& type, const json& payload,
                                                      std::optional<std::string> actor,
                                                      std::optional<store::EventId> caused_by) {
  if (sink_failure_)
    return failure(ErrorCode::invalid_argument,
                   "the event sink failed; no more events are accepted");
  if (write_budget_exhausted_) {
    return failure(ErrorCode::invalid_argument,
                   "the write budget is exhausted; no more events are accepted");
  }
  std::string text = payload.dump();
  // An upper bound of what the store counts: the id and the timestamp are
  // not made yet (an id is at most 24 bytes, a timestamp 24).
  const std::uint64_t bytes = type.size() + text.size() + (actor ? actor->size() : 0) +
                              (caused_by ? caused_by->str().size() : 0) + 48;
  if (refuse_over_write_budget(bytes))
    return failure(ErrorCode::resource_exhausted, write_budget_exhausted_message());
  if (auto applied = graph_.apply(type, payload); !applied) return std::unexpected(applied.error());
  appended_bytes_ += bytes;
  store::Event event;
  event.id = next_event_id();
  event.type = type;
  event.payload = std::move(text);
  event.timestamp = clock_.tick();
  event.actor = std::move(actor);
  event.caused_by = std::move(caused_by);
  event.seq = next_seq_++;
  // The sink never calls into Lua, so catching everything here cannot swallow
  // a Lua error; the exception is rethrown to the caller of load_pack or
  // run_scenario once Lua has unwound.
  try {
    sink_(event);
  } catch (...) {
    sink_failure_ = std::current_exception();
    host_.stop("the event sink failed");
    return failure(ErrorCode::invalid_argument, "the event sink failed to take " + event.id.str());
  }
  const store::EventId id = event.id;
  const bool dispatched = is_dispatched(event.type);
  events_.push_back(std::move(event));
  payloads_.push_back(payload);
  if (dispatched) {
    queue_.push_back(events_.size() - 1);
    idle_emitted_ = false;  // new work: the next drain ends in a new idle
  }
  return id;
}

bool Runtime::refuse_over_write_budget(std::uint64_t bytes) {
  const std::uint64_t events = events_appended();
  const bool over_events =
      config_.max_appended_events != 0 && events + 1 > config_.max_appended_events;
  const bool over_bytes =
      config_.max_appended_bytes != 0 && appended_bytes_ + bytes > config_.max_appended_bytes;
  if (!over_events && !over_bytes) return false;
  write_budget_exhausted_ = true;
  host_.stop("the write budget ran out");
  // The closing record: beyond the budget by design, so the fork says why it
  // ends. It is written straight to the sink (not projected, not queued).
  store::Event event;
  event.id = next_event_id();
  event.type = "runtime.budget_exhausted";
  // activegraph's shape ({"exhausted_by", "snapshot"}) with the write
  // budget's own figures beside it; activegraph readers ignore the extras.
  event.payload = json{{"exhausted_by", over_events ? "max_appended_events" : "max_appended_bytes"},
                       {"snapshot", budget_snapshot()},
                       {"max_appended_events", config_.max_appended_events},
                       {"max_appended_bytes", config_.max_appended_bytes},
                       {"appended_events", events},
                       {"appended_bytes", appended_bytes_}}
                      .dump();
  event.timestamp = clock_.tick();
  event.actor = kRuntimeActor;
  event.seq = next_seq_++;
  try {
    sink_(event);
  } catch (...) {
    sink_failure_ = std::current_exception();
    host_.stop("the event sink failed");
    return true;
  }
  payloads_.push_back(json::parse(event.payload));
  events_.push_back(std::move(event));
  return true;
}

std::string Runtime::write_budget_exhausted_message() const {
  return "the write budget (max_appended_events = " + std::to_string(config_.max_appended_events) +
         ", max_appended_bytes = " + std::to_string(config_.max_appended_bytes) +
         ") is exhausted; the trial stops";
}

std::optional<std::string> Runtime::refusal() const {
  if (memory_cap_hit()) return "memory ran out; the trial stops";
  if (sink_failure_) return "the event sink failed; the trial stops";
  if (write_budget_exhausted_) return write_budget_exhausted_message();
  if (budget_exhausted_) return event_budget_exhausted_message();
  return std::nullopt;
}

std::string Runtime::event_budget_exhausted_message() const {
  return "the event budget (max_events = " + std::to_string(config_.max_events) +
         ") is exhausted; the trial stops";
}

std::optional<std::string> Runtime::missing_llm_provider() const {
  if (config_.max_llm_calls != 0) return std::nullopt;
  for (const auto& pack : packs_) {
    for (const auto& behavior : pack->behaviors) {
      if (!behavior.llm) continue;
      return "MissingProviderError: behavior \"" + pack->name + "." + behavior.name +
             "\" is an LLM behavior (llm = true) but the trial has no LLM provider "
             "(max_llm_calls = 0); drop llm = true or give the trial an LLM budget";
    }
  }
  return std::nullopt;
}

std::expected<store::EventId, Status> Runtime::append_as_origin(const std::string& type,
                                                                const json& payload,
                                                                std::string actor) {
  return append(type, payload, std::move(actor), origin_.caused_by);
}

std::expected<void, Status> Runtime::drain() {
  if (draining_)
    return failure(ErrorCode::invalid_argument, "cannot be called while behaviors are running");
  if (run_until_idle() == Drain::failed)
    return failure(ErrorCode::invalid_argument, "raised: " + dispatch_error_);
  return {};
}

void Runtime::log_line(std::string_view origin, std::string_view message) {
  // Escaped, so that whatever the text holds one call is one line starting
  // with its origin: candidate output cannot pose as anything else.
  log_("[" + escape_controls(origin) + "] " + bounded_escaped(message, kMaxLogLineBytes));
}

Runtime::Drain Runtime::run_until_idle() {
  draining_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{draining_};
  // activegraph's _loop: pop while there is work and budget; every popped
  // event counts, and once the budget is used up (used >= max) no further
  // behavior runs, not even the rest of those matching the event just popped.
  while (!queue_.empty() && budget_remaining()) {
    if (stopped()) return Drain::stopped;
    const std::size_t index = queue_.front();
    queue_.pop_front();
    ++dispatched_;
    const std::string type = events_[index].type;
    for (std::size_t i = 0; i < subscriptions_.size(); ++i) {
      if (!budget_remaining()) break;
      const Subscription subscription = subscriptions_[i];
      const BehaviorDef& def = subscription.pack->behaviors[subscription.behavior];
      if (std::find(def.on.begin(), def.on.end(), type) == def.on.end()) continue;
      if (!def.where.is_null()) {
        const auto holds = where_holds(def.where, payloads_[index]);
        if (!holds) {
          // activegraph's Registry.match evaluates where outside the
          // behavior's error handling: the error leaves run_until_idle, the
          // event stays popped and no runtime.idle is written.
          dispatch_error_ = "the where filter of " + subscription.pack->name + "." + def.name +
                            " on event " + events_[index].id.str() + " (" + type +
                            "): " + holds.error().message;
          return Drain::failed;
        }
        if (!*holds) continue;
      }
      run_behavior(*subscription.pack, subscription.behavior, index);
      if (stopped()) return Drain::stopped;
    }
  }
  if (stopped()) return Drain::stopped;
  // activegraph's _emit_idle_or_exhausted: one record per idle transition.
  if (!idle_emitted_) {
    if (!budget_remaining()) {
      budget_exhausted_ = true;
      append("runtime.budget_exhausted",
             json{{"exhausted_by", "max_events"}, {"snapshot", budget_snapshot()}}, kRuntimeActor,
             std::nullopt);
    } else {
      append("runtime.idle", json{{"snapshot", budget_snapshot()}}, kRuntimeActor, std::nullopt);
    }
    idle_emitted_ = true;
  }
  if (stopped()) return Drain::stopped;
  return budget_exhausted_ ? Drain::budget_exhausted : Drain::idle;
}

void Runtime::run_behavior(PackHost& pack, std::size_t behavior, std::size_t event_index) {
  const BehaviorDef& def = pack.behaviors[behavior];
  const store::EventId trigger = events_[event_index].id;
  const std::string name = pack.actor(def);
  ++behavior_calls_;
  // Lifecycle records name the event they are about as caused_by, as
  // activegraph's _emit_lifecycle does.
  append("behavior.started",
         json{{"behavior", name},
              {"event_id", trigger.str()},
              {"triggering_event_type", events_[event_index].type},
              {"triggering_object_id", triggering_object_id(payloads_[event_index])}},
         kRuntimeActor, trigger);
  if (stopped()) return;
  const Origin saved = origin_;
  origin_ = Origin{&pack, next_invocation_++, name, trigger, {}};
  auto failure = run_protected(pack.state.get(), [&](lua_State* L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, def.run_ref);
    push_event(L, events_[event_index], payloads_[event_index]);
    push_graph(L, pack, origin_.invocation);
    push_ctx(L, pack, -2);
    lua_call(L, 3, 0);
  });
  const BehaviorCounters counters = origin_.counters;
  origin_ = saved;
  if (sink_failure_) return;
  if (!failure) {
    append("behavior.completed",
           json{{"behavior", name},
                {"event_id", trigger.str()},
                {"objects_created", counters.objects_created},
                {"relations_created", counters.relations_created},
                {"patches_applied", counters.patches_applied},
                {"patches_proposed", counters.patches_proposed},
                {"events_emitted", counters.events_emitted}},
           kRuntimeActor, trigger);
    return;
  }
  // activegraph's fields, exception_type naming the kind of error the way a
  // Python class name would; forktrial's own error_type and pack stay as
  // extra keys, which activegraph readers ignore. The error text is the
  // candidate's: it may be any bytes, of any length.
  //
  // A failure counts when its record is written, so the count the tail
  // claims is the store's. A behavior stopped because the write budget ran
  // out did not fail of itself, and its record does not fit the budget: the
  // trial ends limits_exceeded, with runtime.budget_exhausted saying why
  // (docs/decisions/0071-write-budget-stop-not-failure.md).
  const bool memory = memory_cap_hit();
  const auto written =
      append("behavior.failed",
             json{{"behavior", name},
                  {"event_id", trigger.str()},
                  {"exception_type", memory ? "MemoryError" : "LuaError"},
                  {"message", bounded_text(failure->message, kMaxErrorTextBytes)},
                  {"traceback", bounded_text(failure->traceback, kMaxErrorTextBytes)},
                  {"error_type", memory ? "memory_error" : failure->error_type()},
                  {"pack", pack.name}},
             kRuntimeActor, trigger);
  if (written) ++behavior_failures_;
}

std::expected<LoadedPack, LoadError> Runtime::load_pack(const std::filesystem::path& dir,
                                                        PackRole role) {
  auto files = pack::PackFiles::read(dir);
  if (!files) {
    std::vector<std::string> problems;
    for (const auto& violation : files.error().violations) {
      problems.push_back(violation.message());
    }
    return std::unexpected(LoadError(dir, std::move(problems), false));
  }
  return load_pack(std::move(*files), role);
}

std::expected<LoadedPack, LoadError> Runtime::load_pack(pack::PackFiles files, PackRole role) {
  const std::filesystem::path dir = files.root();
  std::vector<std::string> problems;
  bool out_of_memory = false;
  const auto fail = [&](std::string problem) {
    problems.push_back(std::move(problem));
    return std::unexpected(LoadError(dir, problems, out_of_memory));
  };
  if (candidate_loaded_) {
    return fail(
        "the candidate pack is already loaded; extra packs load before it and there is "
        "only one candidate");
  }
  if (stopped()) {
    out_of_memory = memory_cap_hit();
    return fail(
        "the runtime has stopped (memory ran out, the write budget ran out or the event "
        "sink failed)");
  }

  const std::string* manifest_text = files.code(pack::kManifestFile);
  if (manifest_text == nullptr) {
    return fail(std::string(pack::kManifestFile) +
                " is missing; every pack has a manifest.toml at its root");
  }
  auto manifest = pack::parse_manifest(*manifest_text, (dir / pack::kManifestFile).string(),
                                       pack::RuntimeRequirement::required);
  if (!manifest) return fail(manifest.error().message);
  if (manifest->runtime->language != "lua") {
    return fail("manifest.toml [runtime].language is \"" + manifest->runtime->language +
                "\"; this runtime executes only \"lua\" packs");
  }
  for (const auto& loaded : packs_) {
    if (loaded->name == manifest->name) {
      return fail("a pack named \"" + manifest->name + "\" (version " + loaded->version +
                  ", from " + loaded->root.string() +
                  ") is already loaded; two packs with one name cannot share a trial");
    }
  }

  auto host = std::make_unique<PackHost>();
  host->runtime = this;
  host->root = dir;
  host->files = std::move(files);
  host->manifest = *manifest;
  host->entry = manifest->runtime->entry;
  auto state = new_confined_state(host_, seed_from(config_.trial_id + '\0' + manifest->name),
                                  manifest->name);
  if (!state) {
    out_of_memory = memory_cap_hit();
    return fail(state.error().message);
  }
  host->state = std::move(*state);

  auto source = host->files.lua_file(host->entry, "entry file");
  if (!source) return fail(source.error().message);
  auto failure = run_protected(host->state.get(), [&](lua_State* L) {
    install_pack_api(L, *host);
    const std::string chunk_name = "@" + host->entry;
    if (luaL_loadbufferx(L, source->data(), source->size(), chunk_name.c_str(), "t") != LUA_OK) {
      lua_error(L);
    }
    lua_call(L, 0, 1);
    check_returned_pack(L, *host, -1);
  });
  if (sink_failure_) std::rethrow_exception(sink_failure_);
  if (failure) {
    out_of_memory = memory_cap_hit();
    return fail(host->entry + " failed while loading: " + with_traceback(*failure));
  }

  if (host->name != manifest->name) {
    problems.push_back(host->entry + " declares name \"" + host->name +
                       "\" but manifest.toml [pack].name is \"" + manifest->name + "\"");
  }
  if (host->version != manifest->version) {
    problems.push_back(host->entry + " declares version \"" + host->version +
                       "\" but manifest.toml [pack].version is \"" + manifest->version + "\"");
  }
  for (auto& mismatch : compare_surfaces(manifest->surface, host->registered, host->entry)) {
    problems.push_back(std::move(mismatch));
  }
  if (!problems.empty()) return std::unexpected(LoadError(dir, problems, out_of_memory));

  host->sealed = true;
  PackHost& loaded = *host;
  packs_.push_back(std::move(host));
  for (std::size_t i = 0; i < loaded.behaviors.size(); ++i) subscriptions_.push_back({&loaded, i});
  if (role == PackRole::candidate) candidate_loaded_ = true;

  // activegraph's layout (packs/loader.py _build_pack_loaded_payload).
  auto event = append("pack.loaded",
                      json{{"name", loaded.name},
                           {"version", loaded.version},
                           {"description", loaded.manifest.description},
                           {"object_types", loaded.registered.object_types},
                           {"relation_types", loaded.registered.relation_types},
                           {"behaviors", canonical_names(loaded.name, loaded.registered.behaviors)},
                           {"tools", canonical_names(loaded.name, loaded.registered.tools)},
                           {"policies", json::array()},
                           {"prompts", json::object()},
                           {"settings", loaded.settings},
                           {"capabilities", capabilities_json(loaded.registered.capabilities)}},
                      kRuntimeActor, std::nullopt);
  if (sink_failure_) std::rethrow_exception(sink_failure_);
  return LoadedPack{loaded.name, loaded.version, *event};
}

ScenarioResult Runtime::run_scenario(std::string_view spec) {
  std::optional<LuaFailure> failure;
  std::string refusal;
  if (spec.empty()) {
    if (auto missing = missing_llm_provider()) {
      refusal = *missing;
    } else if (run_until_idle() == Drain::failed) {
      refusal = "run_until_idle raised: " + dispatch_error_;
    }
  } else if (!candidate_loaded_) {
    refusal = "no candidate pack is loaded, so the scenario \"" + std::string(spec) +
              "\" has no pack root to resolve in";
  } else if (auto parsed = pack::parse_scenario_spec(spec); !parsed) {
    refusal = parsed.error().message;
  } else if (auto source = packs_.back()->files.lua_file(parsed->path, "scenario path"); !source) {
    refusal = source.error().message;
  } else {
    PackHost& candidate = *packs_.back();
    origin_ = Origin{&candidate, 0, kScenarioActor, std::nullopt, {}};
    failure = run_protected(candidate.state.get(), [&](lua_State* L) {
      const std::string chunk_name = "@" + parsed->path;
      if (luaL_loadbufferx(L, source->data(), source->size(), chunk_name.c_str(), "t") != LUA_OK) {
        lua_error(L);
      }
      const int chunk = lua_gettop(L);
      // The scenario's globals live in their own table that reads through to
      // the pack's globals, so `function main` does not land in the pack.
      lua_newtable(L);
      const int env = lua_gettop(L);
      lua_createtable(L, 0, 1);
      lua_pushglobaltable(L);
      lua_setfield(L, -2, "__index");
      lua_setmetatable(L, env);
      lua_pushvalue(L, env);
      lua_setupvalue(L, chunk, 1);  // a main chunk's only upvalue is _ENV
      lua_pushvalue(L, chunk);
      lua_call(L, 0, 0);
      lua_pushlstring(L, parsed->function.data(), parsed->function.size());
      if (lua_rawget(L, env) != LUA_TFUNCTION) {
        luaL_error(L,
                   "scenario \"%s\" defines no function \"%s\"; define function %s(rt) in it or "
                   "select another with \"%s::name\"",
                   parsed->path.c_str(), parsed->function.c_str(), parsed->function.c_str(),
                   parsed->path.c_str());
      }
      push_rt(L, candidate);
      lua_call(L, 1, 0);
    });
    origin_ = Origin{nullptr, 0, kScenarioActor, std::nullopt, {}};
  }
  if (sink_failure_) std::rethrow_exception(sink_failure_);

  ScenarioResult result;
  result.events_appended = events_appended();
  result.behavior_failures = behavior_failures_;
  if (memory_cap_hit()) {
    result.outcome = Outcome::limits_exceeded;
    result.net = Net::memory;
    result.message = host_.memory_problem();
    // The stop error Lua code got afterwards would only repeat it.
    if (failure && !failure->message.ends_with(host_.stop_message())) {
      result.message += ": " + failure->message;
    }
  } else if (write_budget_exhausted_) {
    result.outcome = Outcome::limits_exceeded;
    result.net = Net::write_budget;
    result.message =
        "the write budget ran out after " + std::to_string(events_appended() - 1) +
        " appended events (max_appended_events = " + std::to_string(config_.max_appended_events) +
        ", max_appended_bytes = " + std::to_string(config_.max_appended_bytes) +
        "); runtime.budget_exhausted was emitted";
  } else if (!refusal.empty()) {
    result.outcome = Outcome::scenario_failed;
    result.message = refusal;
  } else if (failure &&
             !(budget_exhausted_ && failure->message.ends_with(event_budget_exhausted_message()))) {
    // A scenario that raised is scenario_failed even when the event budget
    // ran out too: activegraph's child looks for runtime.budget_exhausted only
    // when the scenario returned. The error the runtime itself raises at a
    // call after the budget ran out is not the scenario's: activegraph's
    // runtime raises none there, so that scenario still ends by the budget.
    result.outcome = Outcome::scenario_failed;
    result.message = failure->message;
    result.traceback = failure->traceback;
  } else if (budget_exhausted_) {
    result.outcome = Outcome::limits_exceeded;
    result.net = Net::event_budget;
    result.message = "the event budget ran out after " + std::to_string(dispatched_) +
                     " dispatched events (max_events = " + std::to_string(config_.max_events) +
                     "); runtime.budget_exhausted was emitted";
  }
  return result;
}

}  // namespace forktrial::runtime
