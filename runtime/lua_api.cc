#include "runtime/lua_api.h"

#include <algorithm>
#include <lua.hpp>
#include <string>
#include <vector>

#include "base/text.h"
#include "runtime/lua_json.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "runtime/runtime_services.h"

namespace forktrial::runtime {

using nlohmann::json;

namespace {

constexpr const char* kGraphMeta = "forktrial.graph";
constexpr const char* kRtMeta = "forktrial.rt";
constexpr const char* kModules = "forktrial.modules";
// A behavior's actor is "<pack>/<behavior>", an event text field; pack names
// are at most 64 bytes (docs/pack-format.md).
constexpr std::size_t kMaxBehaviorNameBytes = store::kMaxEventTextBytes - 65;

struct GraphHandle {
  PackHost* host;
  std::uint64_t invocation;
};

// Raises `message`, prefixed with the calling Lua code's position.
[[noreturn]] void raise(lua_State* L, const std::string& message) {
  luaL_where(L, 1);
  lua_pushlstring(L, message.data(), message.size());
  lua_concat(L, 2);
  lua_error(L);
  std::abort();  // lua_error does not return
}

PackHost& host_upvalue(lua_State* L) {
  return *static_cast<PackHost*>(lua_touserdata(L, lua_upvalueindex(1)));
}

std::string to_string(lua_State* L, int index) {
  std::size_t length = 0;
  const char* data = lua_tolstring(L, index, &length);
  return std::string(data, length);
}

bool has_metatable(lua_State* L, int index, const char* name) {
  if (!lua_getmetatable(L, index)) return false;
  luaL_getmetatable(L, name);
  const bool same = lua_rawequal(L, -1, -2) != 0;
  lua_pop(L, 2);
  return same;
}

// Refuses keys of a spec table other than `allowed`, so a typo is an error
// rather than a silently ignored field.
void check_keys(lua_State* L, int table, std::initializer_list<const char*> allowed,
                const std::string& what) {
  std::vector<std::string> unknown;  // sorted below: the table's order is not deterministic
  lua_pushnil(L);
  while (lua_next(L, table) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      unknown.push_back("a " + std::string(luaL_typename(L, -1)) + " key");
      continue;
    }
    const std::string key = to_string(L, -1);
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](const char* known) { return key == known; })) {
      unknown.push_back("\"" + key + "\"");
    }
  }
  if (unknown.empty()) return;
  std::sort(unknown.begin(), unknown.end());
  std::string list;
  for (const char* key : allowed) list += (list.empty() ? "" : ", ") + std::string(key);
  raise(L, what + ": unknown field " + unknown.front() + " (known fields: " + list + ")");
}

void require_table(lua_State* L, int index, const std::string& what) {
  if (!lua_istable(L, index)) {
    raise(L, what + " expects a table, got " + luaL_typename(L, index));
  }
}

// The string field `key` of the table at `table`; nullopt when absent.
std::optional<std::string> string_field(lua_State* L, int table, const char* key,
                                        const std::string& what, bool required) {
  lua_getfield(L, table, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    if (required) raise(L, what + ": field \"" + key + "\" is required");
    return std::nullopt;
  }
  if (lua_type(L, -1) != LUA_TSTRING) {
    raise(L, what + ": field \"" + key + "\" must be a string, got " + luaL_typename(L, -1));
  }
  std::string value = to_string(L, -1);
  lua_pop(L, 1);
  if (required && value.empty()) raise(L, what + ": field \"" + key + "\" must not be empty");
  return value;
}

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
    out.push_back(to_string(L, list));
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
    std::string item = to_string(L, -1);
    lua_pop(L, 1);
    if (std::find(out.begin(), out.end(), item) != out.end()) {
      raise(L, what + ": " + key + " lists \"" + item + "\" twice");
    }
    out.push_back(std::move(item));
  }
  lua_pop(L, 1);
  return out;
}

// A table argument converted to a JSON object ({} for nil).
json object_argument(lua_State* L, int index, const std::string& what) {
  if (lua_isnoneornil(L, index)) return json::object();
  if (!lua_istable(L, index)) {
    raise(L, what + " must be a table (a JSON object), got " + luaL_typename(L, index));
  }
  auto value = to_json(L, index, what);
  if (!value) raise(L, value.error());
  if (!value->is_object()) {
    raise(L, what + " must be a table with string keys (a JSON object), got a list");
  }
  return std::move(*value);
}

void push_string(lua_State* L, const std::string& text) {
  lua_pushlstring(L, text.data(), text.size());
}

void set_string(lua_State* L, int table, const char* key, const std::string& value) {
  push_string(L, value);
  lua_setfield(L, table, key);
}

void push_object(lua_State* L, const GraphObject& object) {
  lua_createtable(L, 0, 4);
  const int table = lua_gettop(L);
  set_string(L, table, "id", object.id);
  set_string(L, table, "type", object.type);
  push_json(L, object.data);
  lua_setfield(L, table, "data");
  lua_pushinteger(L, static_cast<lua_Integer>(object.version));
  lua_setfield(L, table, "version");
}

void push_relation(lua_State* L, const GraphRelation& relation) {
  lua_createtable(L, 0, 5);
  const int table = lua_gettop(L);
  set_string(L, table, "id", relation.id);
  set_string(L, table, "type", relation.type);
  set_string(L, table, "src", relation.src);
  set_string(L, table, "dst", relation.dst);
  push_json(L, relation.data);
  lua_setfield(L, table, "data");
}

bool declares(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string joined(const std::vector<std::string>& list) {
  if (list.empty()) return "none";
  std::string out;
  for (const auto& item : list) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Raises unless `value`, the event text field `field`, is plain text of at
// most `limit` bytes: the store's rule (store/event.h), checked here so that
// the candidate gets a Lua error instead of a trial stopped by the store.
void require_event_text(lua_State* L, const std::string& what, std::string_view field,
                        std::string_view value, std::size_t limit, std::string_view why = {}) {
  if (auto problem = named_text_problem("field \"" + std::string(field) + "\"", value, limit)) {
    raise(L, what + ": " + *problem + std::string(why));
  }
}

}  // namespace

// The Lua API functions; they reach the runtime through RuntimeServices.
struct LuaApi {
  static RuntimeServices& runtime(PackHost& host) { return *host.runtime; }

  // ---- forktrial.pack{} and pack:behavior{} -------------------------------

  static int forktrial_pack(lua_State* L) {
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
    host.registered.settings_schema =
        string_field(L, 1, "settings_schema", what, false).value_or("");
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
        check_keys(L, entry, {"name", "risk", "action_class"}, item);
        host.registered.capabilities.push_back(
            pack::Capability{*string_field(L, entry, "name", item, true),
                             *string_field(L, entry, "risk", item, true),
                             *string_field(L, entry, "action_class", item, true)});
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

  static int pack_behavior(lua_State* L) {
    PackHost& host = host_upvalue(L);
    const std::string what = "pack:behavior";
    if (host.sealed) raise(L, what + " can only be called while the entry file runs");
    lua_rawgeti(L, LUA_REGISTRYINDEX, host.pack_ref);
    const bool is_pack = lua_rawequal(L, 1, -1) != 0;
    lua_pop(L, 1);
    if (!is_pack) raise(L, what + " must be called on the pack, with ':' (pack:behavior{...})");
    require_table(L, 2, what);
    check_keys(L, 2, {"name", "on", "run", "llm"}, what);
    BehaviorDef behavior;
    behavior.name = *string_field(L, 2, "name", what, true);
    require_event_text(L, what, "name", behavior.name, kMaxBehaviorNameBytes,
                       " (a behavior's name is part of its actor \"<pack>/<behavior>\", which "
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
    lua_getfield(L, 2, "run");
    if (!lua_isfunction(L, -1)) {
      raise(L, named + ": field \"run\" must be a function, got " + luaL_typename(L, -1));
    }
    behavior.run_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    host.registered.behaviors.push_back(behavior.name);
    host.behaviors.push_back(std::move(behavior));
    return 0;
  }

  // ---- require and print ---------------------------------------------------

  static int require(lua_State* L) {
    PackHost& host = host_upvalue(L);
    const std::string name = luaL_checkstring(L, 1);
    const std::string call = "require(\"" + name + "\")";
    lua_getfield(L, LUA_REGISTRYINDEX, kModules);
    const int modules = lua_gettop(L);
    lua_getfield(L, modules, name.c_str());
    if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
      raise(L, call + ": the module requires itself, directly or through other modules");
    }
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);

    if (name.empty()) raise(L, call + ": the module name is empty");
    if (name.front() == '/') raise(L, call + ": module names cannot be absolute paths");
    if (name.find("..") != std::string::npos) {
      raise(L, call + ": module names cannot leave the pack root (\"..\")");
    }
    std::string relative = name;
    std::replace(relative.begin(), relative.end(), '.', '/');
    relative += ".lua";
    std::string_view source;
    {
      auto text = host.files.lua_file(relative, call + " file");
      if (!text) raise(L, text.error());
      source = *text;
    }
    lua_pushboolean(L, 0);  // loading: a cycle finds false
    lua_setfield(L, modules, name.c_str());
    const std::string chunk_name = "@" + relative;
    if (luaL_loadbufferx(L, source.data(), source.size(), chunk_name.c_str(), "t") != LUA_OK) {
      lua_error(L);
    }
    push_string(L, name);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      lua_pushnil(L);  // a failed load may be retried
      lua_setfield(L, modules, name.c_str());
      lua_error(L);
    }
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, modules, name.c_str());
    return 1;
  }

  static int print(lua_State* L) {
    PackHost& host = host_upvalue(L);
    std::string line;
    const int n = lua_gettop(L);
    for (int i = 1; i <= n; ++i) {
      if (i > 1) line += '\t';
      line += to_string(L, (luaL_tolstring(L, i, nullptr), -1));
      lua_pop(L, 1);
    }
    runtime(host).log_line(current_actor(host), line);
    return 0;
  }

  static int ctx_log(lua_State* L) {
    PackHost& host = host_upvalue(L);
    const int message = lua_istable(L, 1) && lua_gettop(L) >= 2 ? 2 : 1;  // ctx.log or ctx:log
    luaL_tolstring(L, message, nullptr);
    runtime(host).log_line(current_actor(host), to_string(L, -1));
    return 0;
  }

  static std::string current_actor(PackHost& host) {
    const RuntimeServices& rt = runtime(host);
    return rt.origin().pack == &host ? rt.origin().actor : host.name;
  }

  // ---- graph ---------------------------------------------------------------

  static GraphHandle& graph_self(lua_State* L, const char* method) {
    auto* handle = static_cast<GraphHandle*>(luaL_testudata(L, 1, kGraphMeta));
    if (handle == nullptr) {
      raise(L, std::string("graph:") + method + " must be called with ':' (graph:" + method +
                   "(...))");
    }
    return *handle;
  }

  // A graph mutation about to happen: the handle, its runtime (checked that
  // the handle may mutate the graph now) and the "graph:<method>" label.
  struct Mutation {
    GraphHandle& self;
    RuntimeServices& rt;
    std::string what;
  };
  static Mutation begin_mutation(lua_State* L, const char* method) {
    GraphHandle& self = graph_self(L, method);
    std::string what = std::string("graph:") + method;
    RuntimeServices& rt = acting(L, self, what);
    return Mutation{self, rt, std::move(what)};
  }

  // The runtime, once it is checked that `handle` may mutate the graph now.
  static RuntimeServices& acting(lua_State* L, GraphHandle& handle, const std::string& what) {
    RuntimeServices& rt = runtime(*handle.host);
    if (rt.origin().pack != handle.host || rt.origin().invocation != handle.invocation) {
      raise(L, what +
                   ": this graph belongs to a behavior run that has finished; use the graph "
                   "passed to the running behavior (or rt.graph in a scenario)");
    }
    refuse_when_stopped(L, rt, what);
    return rt;
  }

  static void refuse_when_stopped(lua_State* L, const RuntimeServices& rt,
                                  const std::string& what) {
    if (auto refusal = rt.refusal()) raise(L, what + ": " + *refusal);
  }

  static std::string append_or_raise(lua_State* L, RuntimeServices& rt, const std::string& what,
                                     const std::string& type, const json& payload,
                                     std::string actor) {
    auto id = rt.append_as_origin(type, payload, std::move(actor));
    if (!id) raise(L, what + ": " + id.error());
    return id->str();
  }

  static std::string new_id(lua_State* L, RuntimeServices& rt, const std::string& type,
                            const std::string& what) {
    auto id = rt.graph().next_id(type);
    if (!id) raise(L, what + ": " + id.error());
    return std::move(*id);
  }

  static const GraphObject& live_object(lua_State* L, RuntimeServices& rt, const std::string& id,
                                        const std::string& what) {
    const GraphObject* object = rt.graph().object(id);
    if (object == nullptr) {
      raise(L, what + ": object \"" + id + "\" " +
                   (rt.graph().was_removed(id) ? "was removed" : "does not exist"));
    }
    return *object;
  }

  static void check_declared(lua_State* L, PackHost& host, const std::vector<std::string>& list,
                             const std::string& kind, const std::string& type,
                             const std::string& what) {
    if (!declares(list, type)) {
      raise(L, what + ": pack \"" + host.name + "\" does not declare " + kind + " \"" + type +
                   "\" (declared: " + joined(list) + "); add it to forktrial.pack{} and to " +
                   "manifest.toml [surface]");
    }
  }

  static int graph_add_object(lua_State* L) {
    auto [self, rt, what] = begin_mutation(L, "add_object");
    const std::string type = luaL_checkstring(L, 2);
    check_declared(L, *self.host, self.host->registered.object_types, "object type", type, what);
    json data = object_argument(L, 3, what + " data");
    const std::string id = new_id(L, rt, type, what);
    append_or_raise(L, rt, what, "object.created",
                    json{{"id", id}, {"type", type}, {"data", std::move(data)}}, rt.origin().actor);
    push_string(L, id);
    return 1;
  }

  // An existing object of a type this pack declares, about to be changed.
  struct OwnObject {
    RuntimeServices& rt;
    std::string id;
    std::string what;
  };
  static OwnObject own_object(lua_State* L, const char* method) {
    auto [self, rt, what] = begin_mutation(L, method);
    std::string id = luaL_checkstring(L, 2);
    const GraphObject& object = live_object(L, rt, id, what);
    check_declared(L, *self.host, self.host->registered.object_types, "object type", object.type,
                   what);
    return OwnObject{rt, std::move(id), std::move(what)};
  }

  static int graph_patch_object(lua_State* L) {
    OwnObject target = own_object(L, "patch_object");
    json patch = object_argument(L, 3, target.what + " patch");
    append_or_raise(L, target.rt, target.what, "patch.applied",
                    json{{"id", target.id}, {"patch", std::move(patch)}}, target.rt.origin().actor);
    return 0;
  }

  static int graph_remove_object(lua_State* L) {
    OwnObject target = own_object(L, "remove_object");
    append_or_raise(L, target.rt, target.what, "object.removed", json{{"id", target.id}},
                    target.rt.origin().actor);
    return 0;
  }

  static int graph_add_relation(lua_State* L) {
    auto [self, rt, what] = begin_mutation(L, "add_relation");
    const std::string src = luaL_checkstring(L, 2);
    const std::string dst = luaL_checkstring(L, 3);
    const std::string type = luaL_checkstring(L, 4);
    live_object(L, rt, src, what + " source");
    live_object(L, rt, dst, what + " target");
    check_declared(L, *self.host, self.host->registered.relation_types, "relation type", type,
                   what);
    json data = object_argument(L, 5, what + " data");
    const std::string id = new_id(L, rt, type, what);
    append_or_raise(
        L, rt, what, "relation.created",
        json{{"id", id}, {"src", src}, {"dst", dst}, {"type", type}, {"data", std::move(data)}},
        rt.origin().actor);
    push_string(L, id);
    return 1;
  }

  static int graph_remove_relation(lua_State* L) {
    auto [self, rt, what] = begin_mutation(L, "remove_relation");
    const std::string id = luaL_checkstring(L, 2);
    const GraphRelation* relation = rt.graph().relation(id);
    if (relation == nullptr) {
      raise(L, what + ": relation \"" + id + "\" " +
                   (rt.graph().was_removed(id) ? "was removed" : "does not exist"));
    }
    check_declared(L, *self.host, self.host->registered.relation_types, "relation type",
                   relation->type, what);
    append_or_raise(L, rt, what, "relation.removed", json{{"id", id}}, rt.origin().actor);
    return 0;
  }

  static int graph_get(lua_State* L) {
    GraphHandle& self = graph_self(L, "get");
    const RuntimeServices& rt = runtime(*self.host);
    const std::string id = luaL_checkstring(L, 2);
    if (const GraphObject* object = rt.graph().object(id)) {
      push_object(L, *object);
    } else if (const GraphRelation* relation = rt.graph().relation(id)) {
      push_relation(L, *relation);
    } else {
      lua_pushnil(L);
    }
    return 1;
  }

  static int graph_objects(lua_State* L) {
    GraphHandle& self = graph_self(L, "objects");
    const RuntimeServices& rt = runtime(*self.host);
    std::optional<std::string> type;
    if (!lua_isnoneornil(L, 2)) type = luaL_checkstring(L, 2);
    const auto objects = rt.graph().objects(type);
    lua_createtable(L, static_cast<int>(objects.size()), 0);
    lua_Integer i = 0;
    for (const GraphObject* object : objects) {
      push_object(L, *object);
      lua_rawseti(L, -2, ++i);
    }
    return 1;
  }

  // emit{type=, payload=, actor=} for graph:emit and rt:emit.
  static std::string emit(lua_State* L, RuntimeServices& rt, int spec, const std::string& what,
                          const std::string& default_actor) {
    require_table(L, spec, what);
    check_keys(L, spec, {"type", "payload", "actor"}, what);
    const std::string type = *string_field(L, spec, "type", what, true);
    require_event_text(L, what, "type", type, store::kMaxEventTextBytes);
    if (auto reserved = reserved_type(type)) raise(L, what + ": " + *reserved);
    lua_getfield(L, spec, "payload");
    json payload = object_argument(L, lua_gettop(L), what + " payload");
    lua_pop(L, 1);
    const std::optional<std::string> actor = string_field(L, spec, "actor", what, false);
    if (actor) {
      require_event_text(L, what, "actor", *actor, store::kMaxEventTextBytes);
      const bool scenario = rt.origin().invocation == 0;
      if (auto reserved = reserved_actor(*actor, rt.origin().pack->name, scenario)) {
        raise(L, what + ": " + *reserved);
      }
    }
    return append_or_raise(L, rt, what, type, payload, actor.value_or(default_actor));
  }

  static int graph_emit(lua_State* L) {
    GraphHandle& self = graph_self(L, "emit");
    RuntimeServices& rt = acting(L, self, "graph:emit");
    push_string(L, emit(L, rt, 2, "graph:emit", rt.origin().actor));
    return 1;
  }

  // ---- rt ------------------------------------------------------------------

  static PackHost& rt_self(lua_State* L, const char* method) {
    if (!lua_istable(L, 1) || !has_metatable(L, 1, kRtMeta)) {
      raise(L, std::string("rt:") + method + " must be called with ':' (rt:" + method + "(...))");
    }
    return host_upvalue(L);
  }

  static RuntimeServices& scenario_runtime(lua_State* L, PackHost& host, const std::string& what) {
    RuntimeServices& rt = runtime(host);
    if (rt.origin().pack != &host || rt.origin().invocation != 0) {
      raise(L, what + " can only be called by the scenario, not from a behavior");
    }
    refuse_when_stopped(L, rt, what);
    return rt;
  }

  static int rt_events(lua_State* L) {
    PackHost& host = rt_self(L, "events");
    const RuntimeServices& rt = runtime(host);
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

  static int rt_emit(lua_State* L) {
    PackHost& host = rt_self(L, "emit");
    RuntimeServices& rt = scenario_runtime(L, host, "rt:emit");
    push_string(L, emit(L, rt, 2, "rt:emit", rt.origin().actor));
    return 1;
  }

  static void drain(lua_State* L, RuntimeServices& rt, const std::string& what) {
    if (!rt.drain()) raise(L, what + " cannot be called while behaviors are running");
    refuse_when_stopped(L, rt, what);
  }

  static int rt_run_until_idle(lua_State* L) {
    PackHost& host = rt_self(L, "run_until_idle");
    RuntimeServices& rt = scenario_runtime(L, host, "rt:run_until_idle");
    drain(L, rt, "rt:run_until_idle");
    return 0;
  }

  static int rt_run_goal(lua_State* L) {
    PackHost& host = rt_self(L, "run_goal");
    const std::string what = "rt:run_goal";
    RuntimeServices& rt = scenario_runtime(L, host, what);
    luaL_checkstring(L, 2);
    auto goal = to_json(L, 2, what + " goal");  // a payload string: valid UTF-8
    if (!goal) raise(L, goal.error());
    const std::string id =
        append_or_raise(L, rt, what, "goal.created", json{{"goal", *goal}}, rt.origin().actor);
    drain(L, rt, what);
    push_string(L, id);
    return 1;
  }
};

void install_pack_api(lua_State* L, PackHost& host) {
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kModules);

  lua_createtable(L, 0, 1);
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<LuaApi::forktrial_pack>, 1);
  lua_setfield(L, -2, "pack");
  lua_setglobal(L, "forktrial");

  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<LuaApi::require>, 1);
  lua_setglobal(L, "require");
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<LuaApi::print>, 1);
  lua_setglobal(L, "print");

  const luaL_Reg graph_methods[] = {
      {"add_object", cxx_boundary<LuaApi::graph_add_object>},
      {"patch_object", cxx_boundary<LuaApi::graph_patch_object>},
      {"remove_object", cxx_boundary<LuaApi::graph_remove_object>},
      {"add_relation", cxx_boundary<LuaApi::graph_add_relation>},
      {"remove_relation", cxx_boundary<LuaApi::graph_remove_relation>},
      {"get", cxx_boundary<LuaApi::graph_get>},
      {"objects", cxx_boundary<LuaApi::graph_objects>},
      {"emit", cxx_boundary<LuaApi::graph_emit>},
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kGraphMeta);
  luaL_newlib(L, graph_methods);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "graph");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);

  luaL_newmetatable(L, kRtMeta);
  lua_pushliteral(L, "rt");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
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

void push_event(lua_State* L, const store::Event& event, const json& payload) {
  lua_createtable(L, 0, 7);
  const int table = lua_gettop(L);
  set_string(L, table, "id", event.id.str());
  set_string(L, table, "type", event.type);
  push_json(L, payload);
  lua_setfield(L, table, "payload");
  if (event.actor) set_string(L, table, "actor", *event.actor);
  if (event.caused_by) set_string(L, table, "caused_by", event.caused_by->str());
  set_string(L, table, "timestamp", event.timestamp);
  lua_pushinteger(L, static_cast<lua_Integer>(event.seq));
  lua_setfield(L, table, "seq");
}

void push_graph(lua_State* L, PackHost& host, std::uint64_t invocation) {
  auto* handle = static_cast<GraphHandle*>(lua_newuserdatauv(L, sizeof(GraphHandle), 0));
  *handle = GraphHandle{&host, invocation};
  luaL_setmetatable(L, kGraphMeta);
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
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<LuaApi::ctx_log>, 1);
  lua_setfield(L, ctx, "log");
}

void push_rt(lua_State* L, PackHost& host) {
  lua_createtable(L, 0, 6);
  const int rt = lua_gettop(L);
  set_string(L, rt, "run_id", host.runtime->run_id().str());
  push_graph(L, host, 0);
  lua_setfield(L, rt, "graph");
  const luaL_Reg methods[] = {
      {"events", cxx_boundary<LuaApi::rt_events>},
      {"emit", cxx_boundary<LuaApi::rt_emit>},
      {"run_until_idle", cxx_boundary<LuaApi::rt_run_until_idle>},
      {"run_goal", cxx_boundary<LuaApi::rt_run_goal>},
      {nullptr, nullptr},
  };
  lua_pushlightuserdata(L, &host);
  luaL_setfuncs(L, methods, 1);
  luaL_setmetatable(L, kRtMeta);
}

}  // namespace forktrial::runtime
