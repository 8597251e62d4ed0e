#include "runtime/lua_pack.h"

#include <algorithm>
#include <lua.hpp>
#include <string>
#include <vector>

#include "runtime/lua_args.h"
#include "runtime/lua_globals.h"
#include "runtime/lua_json.h"
#include "runtime/pack_host.h"
#include "runtime/where.h"
#include "store/event.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

namespace {

// A behavior's actor is "<pack>.<behavior>", an event text field; pack names
// are at most 64 bytes (docs/pack-format.md).
constexpr std::size_t kMaxBehaviorNameBytes = store::kMaxEventTextBytes - 65;

// A list of strings (a one-string shorthand is accepted when `single_ok`).
std::vector<std::string> string_list_field(lua_State* L, int table, const char* key,
                                           const std::string& what, bool single_ok = false) {
  std::vector<std::string> out;
  lua_getfield(L, table, key);
  const int list = lua_gettop(L);
  if (lua_isnil(L, list)) {
    lua_pop(L, 1);
    return out;
  }
  if (single_ok && lua_type(L, list) == LUA_TSTRING) {
    out.push_back(string_at(L, list));
    lua_pop(L, 1);
    return out;
  }
  if (!lua_istable(L, list)) {
    raise(L, what + ": field \"" + key + "\" must be a list of strings, got " +
                 luaL_typename(L, list));
  }
  const lua_Integer n = luaL_len(L, list);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, list, i);
    if (lua_type(L, -1) != LUA_TSTRING || lua_rawlen(L, -1) == 0) {
      raise(L, what + ": " + key + "[" + std::to_string(i) + "] must be a non-empty string, got " +
                   luaL_typename(L, -1));
    }
    std::string item = string_at(L, -1);
    lua_pop(L, 1);
    if (std::find(out.begin(), out.end(), item) != out.end()) {
      raise(L, what + ": " + key + " lists \"" + item + "\" twice");
    }
    out.push_back(std::move(item));
  }
  lua_pop(L, 1);
  return out;
}

int pack_behavior(lua_State* L) {
  PackHost& host = host_upvalue(L);
  const std::string what = "pack:behavior";
  if (host.sealed) raise(L, what + " can only be called while the entry file runs");
  lua_rawgeti(L, LUA_REGISTRYINDEX, host.pack_ref);
  const bool is_pack = lua_rawequal(L, 1, -1) != 0;
  lua_pop(L, 1);
  if (!is_pack) raise(L, what + " must be called on the pack, with ':' (pack:behavior{...})");
  require_table(L, 2, what);
  check_keys(L, 2, {"name", "on", "run", "llm", "where"}, what);
  BehaviorDef behavior;
  behavior.name = *string_field(L, 2, "name", what, true);
  require_event_text(L, what, "name", behavior.name, kMaxBehaviorNameBytes,
                     " (a behavior's name is part of its actor \"<pack>.<behavior>\", which "
                     "must be plain text)");
  const std::string named = what + " \"" + behavior.name + "\"";
  for (const auto& existing : host.behaviors) {
    if (existing.name == behavior.name) raise(L, named + " is registered twice");
  }
  behavior.on = string_list_field(L, 2, "on", named, true);
  if (behavior.on.empty()) raise(L, named + ": field \"on\" must list at least one event type");
  lua_getfield(L, 2, "llm");
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) {
    raise(L, named + ": field \"llm\" must be a boolean, got " + luaL_typename(L, -1));
  }
  behavior.llm = lua_toboolean(L, -1) != 0;
  lua_pop(L, 1);
  lua_getfield(L, 2, "where");
  if (!lua_isnil(L, -1)) {
    auto where = to_json(L, lua_gettop(L), named + " where");
    if (!where) raise(L, where.error().message);
    if (where->is_array() && where->empty()) *where = json::object();  // {} converts as a list
    if (auto problem = where_problem(*where)) raise(L, named + ": " + *problem);
    behavior.where = std::move(*where);
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "run");
  if (!lua_isfunction(L, -1)) {
    raise(L, named + ": field \"run\" must be a function, got " + luaL_typename(L, -1));
  }
  behavior.run_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  host.registered.behaviors.push_back(behavior.name);
  host.behaviors.push_back(std::move(behavior));
  return 0;
}

int forktrial_pack(lua_State* L) {
  PackHost& host = host_upvalue(L);
  const std::string what = "forktrial.pack";
  if (host.sealed) raise(L, what + " can only be called while the entry file runs");
  if (host.declared) {
    raise(L, what + " was already called; an entry file makes exactly one pack");
  }
  require_table(L, 1, what);
  check_keys(L, 1,
             {"name", "version", "object_types", "relation_types", "tools", "settings_schema",
              "capabilities", "settings"},
             what);
  host.name = *string_field(L, 1, "name", what, true);
  host.version = *string_field(L, 1, "version", what, true);
  host.registered.object_types = string_list_field(L, 1, "object_types", what);
  host.registered.relation_types = string_list_field(L, 1, "relation_types", what);
  host.registered.tools = string_list_field(L, 1, "tools", what);
  host.registered.settings_schema = string_field(L, 1, "settings_schema", what, false).value_or("");
  lua_getfield(L, 1, "capabilities");
  const int capabilities = lua_gettop(L);
  if (!lua_isnil(L, capabilities)) {
    require_table(L, capabilities, what + " capabilities");
    const lua_Integer n = luaL_len(L, capabilities);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L, capabilities, i);
      const std::string item = what + " capabilities[" + std::to_string(i) + "]";
      require_table(L, -1, item);
      const int entry = lua_gettop(L);
      check_keys(L, entry,
                 {"provider", "capability", "risk_class", "credential_ref", "action_class"}, item);
      pack::Capability capability;
      capability.provider = *string_field(L, entry, "provider", item, true);
      capability.capability = *string_field(L, entry, "capability", item, true);
      capability.risk_class = *string_field(L, entry, "risk_class", item, true);
      capability.credential_ref =
          string_field(L, entry, "credential_ref", item, false).value_or("");
      capability.action_class = string_field(L, entry, "action_class", item, false).value_or("");
      host.registered.capabilities.push_back(std::move(capability));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "settings");
  host.settings = object_argument(L, lua_gettop(L), what + " settings");
  lua_pop(L, 1);

  lua_createtable(L, 0, 2);
  const int pack = lua_gettop(L);
  set_string(L, pack, "name", host.name);
  set_string(L, pack, "version", host.version);
  lua_createtable(L, 0, 1);  // metatable
  lua_createtable(L, 0, 1);  // methods
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<pack_behavior>, 1);
  lua_setfield(L, -2, "behavior");
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, pack);
  lua_pushvalue(L, pack);
  host.pack_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  host.declared = true;
  return 1;
}

}  // namespace

void install_forktrial(lua_State* L, PackHost& host) {
  lua_createtable(L, 0, 1);
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<forktrial_pack>, 1);
  lua_setfield(L, -2, "pack");
  lua_setglobal(L, "forktrial");
}

void check_returned_pack(lua_State* L, PackHost& host, int index) {
  index = lua_absindex(L, index);
  if (!host.declared) {
    raise(L, host.entry +
                 " did not call forktrial.pack{...}; the entry file must return the "
                 "pack it makes");
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, host.pack_ref);
  const bool same = lua_rawequal(L, index, -1) != 0;
  lua_pop(L, 1);
  if (!same) {
    raise(L, host.entry + " must return the pack made by forktrial.pack{...}, but returned a " +
                 luaL_typename(L, index) + " value");
  }
}

void push_ctx(lua_State* L, PackHost& host, int event) {
  event = lua_absindex(L, event);
  lua_createtable(L, 0, 4);
  const int ctx = lua_gettop(L);
  push_json(L, host.settings);
  lua_setfield(L, ctx, "settings");
  lua_createtable(L, 0, 2);
  set_string(L, lua_gettop(L), "name", host.name);
  set_string(L, lua_gettop(L), "version", host.version);
  lua_setfield(L, ctx, "pack");
  lua_pushvalue(L, event);
  lua_setfield(L, ctx, "event");
  push_ctx_log(L, host);
  lua_setfield(L, ctx, "log");
}

}  // namespace forktrial::runtime
