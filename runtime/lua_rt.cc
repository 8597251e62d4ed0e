#include "runtime/lua_rt.h"

#include <lua.hpp>
#include <optional>
#include <string>

#include "runtime/lua_args.h"
#include "runtime/lua_emit.h"
#include "runtime/lua_event.h"
#include "runtime/lua_graph.h"
#include "runtime/lua_json.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "runtime/runtime_services.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kRtMeta = "forktrial.rt";

bool has_metatable(lua_State* L, int index, const char* name) {
  if (!lua_getmetatable(L, index)) return false;
  luaL_getmetatable(L, name);
  const bool same = lua_rawequal(L, -1, -2) != 0;
  lua_pop(L, 2);
  return same;
}

PackHost& rt_self(lua_State* L, const char* method) {
  if (!lua_istable(L, 1) || !has_metatable(L, 1, kRtMeta)) {
    raise(L, std::string("rt:") + method + " must be called with ':' (rt:" + method + "(...))");
  }
  return host_upvalue(L);
}

// The runtime, once it is checked that the scenario of `host` acts now.
RuntimeServices& scenario_runtime(lua_State* L, PackHost& host, const std::string& what) {
  RuntimeServices& rt = *host.runtime;
  if (rt.origin().pack != &host || rt.origin().invocation != 0) {
    raise(L, what + " can only be called by the scenario, not from a behavior");
  }
  refuse_when_stopped(L, rt, what);
  return rt;
}

int rt_events(lua_State* L) {
  PackHost& host = rt_self(L, "events");
  const RuntimeServices& rt = *host.runtime;
  std::optional<std::string> type;
  if (!lua_isnoneornil(L, 2)) type = luaL_checkstring(L, 2);
  lua_newtable(L);
  lua_Integer n = 0;
  const auto& events = rt.events();
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (type && events[i].type != *type) continue;
    push_event(L, events[i], rt.payload(i));
    lua_rawseti(L, -2, ++n);
  }
  return 1;
}

int rt_emit(lua_State* L) {
  PackHost& host = rt_self(L, "emit");
  RuntimeServices& rt = scenario_runtime(L, host, "rt:emit");
  push_string(L, emit(L, rt, 2, "rt:emit", rt.origin().actor));
  return 1;
}

// activegraph raises MissingProviderError at its entry points, before they
// write or dispatch anything: so does a scenario here.
void refuse_without_llm_provider(lua_State* L, const RuntimeServices& rt, const std::string& what) {
  if (auto missing = rt.missing_llm_provider()) raise(L, what + ": " + *missing);
}

void drain(lua_State* L, RuntimeServices& rt, const std::string& what) {
  if (auto drained = rt.drain(); !drained) raise(L, what + " " + drained.error().message);
  refuse_when_stopped(L, rt, what);
}

int rt_run_until_idle(lua_State* L) {
  PackHost& host = rt_self(L, "run_until_idle");
  RuntimeServices& rt = scenario_runtime(L, host, "rt:run_until_idle");
  refuse_without_llm_provider(L, rt, "rt:run_until_idle");
  drain(L, rt, "rt:run_until_idle");
  return 0;
}

int rt_run_goal(lua_State* L) {
  PackHost& host = rt_self(L, "run_goal");
  const std::string what = "rt:run_goal";
  RuntimeServices& rt = scenario_runtime(L, host, what);
  refuse_without_llm_provider(L, rt, what);
  luaL_checkstring(L, 2);
  auto goal = to_json(L, 2, what + " goal");  // a payload string: valid UTF-8
  if (!goal) raise(L, goal.error().message);
  // activegraph's run_goal writes goals as "user".
  const std::string id =
      append_or_raise(L, rt, what, "goal.created", json{{"goal", *goal}}, kUserActor);
  drain(L, rt, what);
  push_string(L, id);
  return 1;
}

}  // namespace

void register_rt_type(lua_State* L) {
  luaL_newmetatable(L, kRtMeta);
  lua_pushliteral(L, "rt");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

void push_rt(lua_State* L, PackHost& host) {
  lua_createtable(L, 0, 6);
  const int rt = lua_gettop(L);
  set_string(L, rt, "run_id", host.runtime->run_id().str());
  push_graph(L, host, 0);
  lua_setfield(L, rt, "graph");
  const luaL_Reg methods[] = {
      {"events", cxx_boundary<rt_events>},
      {"emit", cxx_boundary<rt_emit>},
      {"run_until_idle", cxx_boundary<rt_run_until_idle>},
      {"run_goal", cxx_boundary<rt_run_goal>},
      {nullptr, nullptr},
  };
  lua_pushlightuserdata(L, &host);
  luaL_setfuncs(L, methods, 1);
  luaL_setmetatable(L, kRtMeta);
}

}  // namespace forktrial::runtime
