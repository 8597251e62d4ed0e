#include "runtime/runtime.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <lua.hpp>

#include "base/text.h"
#include "pack/pack_check.h"
#include "runtime/lua_api.h"
#include "runtime/lua_event.h"
#include "runtime/lua_graph.h"
#include "runtime/lua_pack.h"
#include "runtime/lua_rt.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "runtime/scenario.h"
#include "runtime/surface_check.h"
#include "store/payload.h"

namespace forktrial::runtime {

using nlohmann::json;

namespace {

// Lifecycle events are records about the loop, not work for it.
bool is_dispatched(std::string_view type) {
  return !type.starts_with("behavior.") && !type.starts_with("runtime.");
}

json capabilities_json(const std::vector<pack::Capability>& capabilities) {
  json out = json::array();
  for (const auto& capability : capabilities) {
    out.push_back({{"provider", capability.provider},
                   {"capability", capability.capability},
                   {"risk_class", capability.risk_class},
                   {"credential_ref", capability.credential_ref},
                   {"action_class", capability.action_class}});
  }
  return out;
}

json surface_json(const pack::Surface& surface) {
  return {{"object_types", surface.object_types},
          {"relation_types", surface.relation_types},
          {"behaviors", surface.behaviors},
          {"tools", surface.tools},
          {"settings_schema", surface.settings_schema},
          {"capabilities", capabilities_json(surface.capabilities)}};
}

std::string with_traceback(const LuaFailure& failure) {
  return failure.traceback.empty() ? failure.message : failure.message + "\n" + failure.traceback;
}

}  // namespace

std::string LoadError::message() const {
  std::string out = "cannot load the pack at " + pack_dir.string() + ":";
  for (const auto& problem : problems) out += "\n  - " + problem;
  return out;
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

std::expected<std::unique_ptr<Runtime>, std::string> Runtime::create(
    RuntimeConfig config, std::vector<store::Event> history, EventSink sink, LogSink log) {
  std::unique_ptr<Runtime> rt(new Runtime(std::move(config), std::move(sink), std::move(log)));
  if (!history.empty()) {
    auto start = parse_timestamp(history.back().timestamp);
    if (!start) {
      return std::unexpected("the fork tip " + history.back().id.str() +
                             " has a bad timestamp: " + start.error());
    }
    rt->clock_ = TickingClock(*start);
  }
  rt->payloads_.reserve(history.size());
  for (const auto& event : history) {
    const std::string where = "event " + event.id.str() + " (" + event.type + ", seq " +
                              std::to_string(event.seq) + ") of the fork's history";
    if (auto deep = store::payload_depth_problem(event.payload)) {
      return std::unexpected(where + " cannot be projected: its payload is " + *deep);
    }
    json payload = json::parse(event.payload, nullptr, false);
    if (payload.is_discarded()) return std::unexpected(where + " has a payload that is not JSON");
    if (auto applied = rt->graph_.apply(event.type, payload); !applied) {
      return std::unexpected("cannot project " + where + ": " + applied.error());
    }
    rt->used_event_ids_.insert(event.id.str());
    rt->payloads_.push_back(std::move(payload));
  }
  const std::uint64_t last_seq =
      history.empty() ? 0 : std::max<std::uint64_t>(history.back().seq, history.size());
  rt->next_seq_ = last_seq + 1;
  rt->next_event_number_ = last_seq + 1;
  rt->history_size_ = history.size();
  rt->events_ = std::move(history);
  rt->origin_.actor = kScenarioActor;
  return rt;
}

store::EventId Runtime::next_event_id() {
  for (;;) {
    store::EventId id = store::numbered_event_id(next_event_number_++);
    if (used_event_ids_.insert(id.str()).second) return id;
  }
}

std::expected<store::EventId, std::string> Runtime::append(
    const std::string& type, const json& payload, std::optional<std::string> actor,
    std::optional<store::EventId> caused_by) {
  if (sink_failure_) return std::unexpected("the event sink failed; no more events are accepted");
  if (write_budget_exhausted_) {
    return std::unexpected("the write budget is exhausted; no more events are accepted");
  }
  std::string text = payload.dump();
  // An upper bound of what the store counts: the id and the timestamp are
  // not made yet (an id is at most 24 bytes, a timestamp 24).
  const std::uint64_t bytes = type.size() + text.size() + (actor ? actor->size() : 0) +
                              (caused_by ? caused_by->str().size() : 0) + 48;
  if (refuse_over_write_budget(bytes)) return std::unexpected(write_budget_exhausted_message());
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
    return std::unexpected("the event sink failed to take " + event.id.str());
  }
  const store::EventId id = event.id;
  const bool dispatched = is_dispatched(event.type);
  events_.push_back(std::move(event));
  payloads_.push_back(payload);
  if (dispatched) queue_.push_back(events_.size() - 1);
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
  event.payload = json{{"exhausted_by", over_events ? "max_appended_events" : "max_appended_bytes"},
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
  if (budget_exhausted_) {
    return "the event budget (max_events = " + std::to_string(config_.max_events) +
           ") is exhausted; the trial stops";
  }
  return std::nullopt;
}

std::expected<store::EventId, std::string> Runtime::append_as_origin(const std::string& type,
                                                                     const json& payload,
                                                                     std::string actor) {
  return append(type, payload, std::move(actor), origin_.caused_by);
}

bool Runtime::drain() {
  if (draining_) return false;
  run_until_idle();
  return true;
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
  for (;;) {
    if (stopped()) return Drain::stopped;
    if (budget_exhausted_) return Drain::budget_exhausted;
    if (queue_.empty()) {
      append("runtime.idle", json{{"dispatched", dispatched_}}, kRuntimeActor, std::nullopt);
      return stopped() ? Drain::stopped : Drain::idle;
    }
    if (config_.max_events != 0 && dispatched_ >= config_.max_events) {
      budget_exhausted_ = true;
      append("runtime.budget_exhausted",
             json{{"max_events", config_.max_events},
                  {"dispatched", dispatched_},
                  {"pending", queue_.size()}},
             kRuntimeActor, std::nullopt);
      return Drain::budget_exhausted;
    }
    const std::size_t index = queue_.front();
    queue_.pop_front();
    ++dispatched_;
    const std::string type = events_[index].type;
    for (std::size_t i = 0; i < subscriptions_.size(); ++i) {
      const Subscription subscription = subscriptions_[i];
      const auto& on = subscription.pack->behaviors[subscription.behavior].on;
      if (std::find(on.begin(), on.end(), type) == on.end()) continue;
      run_behavior(*subscription.pack, subscription.behavior, index);
      if (stopped()) return Drain::stopped;
    }
  }
}

void Runtime::run_behavior(PackHost& pack, std::size_t behavior, std::size_t event_index) {
  const BehaviorDef& def = pack.behaviors[behavior];
  const store::EventId trigger = events_[event_index].id;
  const Origin saved = origin_;
  origin_ = Origin{&pack, next_invocation_++, pack.actor(def), trigger};
  auto failure = run_protected(pack.state.get(), [&](lua_State* L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, def.run_ref);
    push_event(L, events_[event_index], payloads_[event_index]);
    push_graph(L, pack, origin_.invocation);
    push_ctx(L, pack, -2);
    lua_call(L, 3, 0);
  });
  origin_ = saved;
  if (!failure || sink_failure_) return;
  ++behavior_failures_;
  // The error text is the candidate's: it may be any bytes, of any length.
  append("behavior.failed",
         json{{"behavior", def.name},
              {"pack", pack.name},
              {"event_id", trigger.str()},
              {"error_type", memory_cap_hit() ? "memory_error" : failure->error_type()},
              {"message", bounded_text(failure->message, kMaxErrorTextBytes)},
              {"traceback", bounded_text(failure->traceback, kMaxErrorTextBytes)}},
         kRuntimeActor, trigger);
}

std::expected<LoadedPack, LoadError> Runtime::load_pack(const std::filesystem::path& dir,
                                                        PackRole role) {
  auto files = pack::PackFiles::read(dir);
  if (!files) {
    LoadError error{dir, {}, false};
    for (const auto& violation : files.error().violations) {
      error.problems.push_back(violation.message());
    }
    return std::unexpected(error);
  }
  return load_pack(std::move(*files), role);
}

std::expected<LoadedPack, LoadError> Runtime::load_pack(pack::PackFiles files, PackRole role) {
  const std::filesystem::path dir = files.root();
  LoadError error{dir, {}, false};
  const auto fail = [&](std::string problem) {
    error.problems.push_back(std::move(problem));
    return std::unexpected(error);
  };
  if (candidate_loaded_) {
    return fail(
        "the candidate pack is already loaded; extra packs load before it and there is "
        "only one candidate");
  }
  if (stopped()) {
    error.memory_cap_hit = memory_cap_hit();
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
  if (!manifest) return fail(manifest.error().message());
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
    error.memory_cap_hit = memory_cap_hit();
    return fail(state.error());
  }
  host->state = std::move(*state);

  auto source = host->files.lua_file(host->entry, "entry file");
  if (!source) return fail(source.error());
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
    error.memory_cap_hit = memory_cap_hit();
    return fail(host->entry + " failed while loading: " + with_traceback(*failure));
  }

  if (host->name != manifest->name) {
    error.problems.push_back(host->entry + " declares name \"" + host->name +
                             "\" but manifest.toml [pack].name is \"" + manifest->name + "\"");
  }
  if (host->version != manifest->version) {
    error.problems.push_back(host->entry + " declares version \"" + host->version +
                             "\" but manifest.toml [pack].version is \"" + manifest->version +
                             "\"");
  }
  if (config_.max_llm_calls == 0) {
    for (const auto& behavior : host->behaviors) {
      if (!behavior.llm) continue;
      error.problems.push_back(
          "pack \"" + host->name +
          "\" declares an LLM behavior but no LLM provider exists in a trial with "
          "max_llm_calls = 0 (behavior \"" +
          behavior.name + "\" has llm = true); drop llm = true or give the trial an LLM budget");
    }
  }
  for (auto& mismatch : compare_surfaces(manifest->surface, host->registered, host->entry)) {
    error.problems.push_back(std::move(mismatch));
  }
  if (!error.problems.empty()) return std::unexpected(error);

  host->sealed = true;
  PackHost& loaded = *host;
  packs_.push_back(std::move(host));
  for (std::size_t i = 0; i < loaded.behaviors.size(); ++i) subscriptions_.push_back({&loaded, i});
  if (role == PackRole::candidate) candidate_loaded_ = true;

  auto event = append("pack.loaded",
                      json{{"name", loaded.name},
                           {"version", loaded.version},
                           {"surface", surface_json(loaded.registered)}},
                      kRuntimeActor, std::nullopt);
  if (sink_failure_) std::rethrow_exception(sink_failure_);
  return LoadedPack{loaded.name, loaded.version, *event};
}

ScenarioResult Runtime::run_scenario(std::string_view spec) {
  std::optional<LuaFailure> failure;
  std::string refusal;
  if (spec.empty()) {
    run_until_idle();
  } else if (!candidate_loaded_) {
    refusal = "no candidate pack is loaded, so the scenario \"" + std::string(spec) +
              "\" has no pack root to resolve in";
  } else if (auto parsed = parse_scenario_spec(spec); !parsed) {
    refusal = parsed.error();
  } else if (auto source = packs_.back()->files.lua_file(parsed->path, "scenario path"); !source) {
    refusal = source.error();
  } else {
    PackHost& candidate = *packs_.back();
    origin_ = Origin{&candidate, 0, kScenarioActor, std::nullopt};
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
    origin_ = Origin{nullptr, 0, kScenarioActor, std::nullopt};
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
  } else if (budget_exhausted_) {
    result.outcome = Outcome::limits_exceeded;
    result.net = Net::event_budget;
    result.message = "the event budget ran out after " + std::to_string(dispatched_) +
                     " dispatched events (max_events = " + std::to_string(config_.max_events) +
                     "); runtime.budget_exhausted was emitted";
  } else if (!refusal.empty()) {
    result.outcome = Outcome::scenario_failed;
    result.message = refusal;
  } else if (failure) {
    result.outcome = Outcome::scenario_failed;
    result.message = failure->message;
    result.traceback = failure->traceback;
  }
  return result;
}

}  // namespace forktrial::runtime
