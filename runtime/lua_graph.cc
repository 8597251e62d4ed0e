#include "runtime/lua_graph.h"

#include <algorithm>
#include <lua.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/lua_args.h"
#include "runtime/lua_emit.h"
#include "runtime/lua_json.h"
#include "runtime/pack_host.h"
#include "runtime/runtime_services.h"

namespace forktrial::runtime {

using nlohmann::json;

namespace {

constexpr const char* kGraphMeta = "forktrial.graph";

struct GraphHandle {
  PackHost* host;
  std::uint64_t invocation;
};

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

GraphHandle& graph_self(lua_State* L, const char* method) {
  auto* handle = static_cast<GraphHandle*>(luaL_testudata(L, 1, kGraphMeta));
  if (handle == nullptr) {
    raise(L,
          std::string("graph:") + method + " must be called with ':' (graph:" + method + "(...))");
  }
  return *handle;
}

// The runtime, once it is checked that `handle` may mutate the graph now.
RuntimeServices& acting(lua_State* L, GraphHandle& handle, const std::string& what) {
  RuntimeServices& rt = *handle.host->runtime;
  if (rt.origin().pack != handle.host || rt.origin().invocation != handle.invocation) {
    raise(L, what +
                 ": this graph belongs to a behavior run that has finished; use the graph "
                 "passed to the running behavior (or rt.graph in a scenario)");
  }
  refuse_when_stopped(L, rt, what);
  return rt;
}

// A graph mutation about to happen: the handle, its runtime (checked that
// the handle may mutate the graph now) and the "graph:<method>" label.
struct Mutation {
  GraphHandle& self;
  RuntimeServices& rt;
  std::string what;
};
Mutation begin_mutation(lua_State* L, const char* method) {
  GraphHandle& self = graph_self(L, method);
  std::string what = std::string("graph:") + method;
  RuntimeServices& rt = acting(L, self, what);
  return Mutation{self, rt, std::move(what)};
}

std::string new_id(lua_State* L, const RuntimeServices& rt, const std::string& type,
                   const std::string& what) {
  auto id = rt.graph().next_id(type);
  if (!id) raise(L, what + ": " + id.error());
  return std::move(*id);
}

const GraphObject& live_object(lua_State* L, const RuntimeServices& rt, const std::string& id,
                               const std::string& what) {
  const GraphObject* object = rt.graph().object(id);
  if (object == nullptr) {
    raise(L, what + ": object \"" + id + "\" " +
                 (rt.graph().was_removed(id) ? "was removed" : "does not exist"));
  }
  return *object;
}

void check_declared(lua_State* L, const PackHost& host, const std::vector<std::string>& list,
                    const std::string& kind, const std::string& type, const std::string& what) {
  if (!declares(list, type)) {
    raise(L, what + ": pack \"" + host.name + "\" does not declare " + kind + " \"" + type +
                 "\" (declared: " + joined(list) + "); add it to forktrial.pack{} and to " +
                 "manifest.toml [surface]");
  }
}

int graph_add_object(lua_State* L) {
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
OwnObject own_object(lua_State* L, const char* method) {
  auto [self, rt, what] = begin_mutation(L, method);
  std::string id = luaL_checkstring(L, 2);
  const GraphObject& object = live_object(L, rt, id, what);
  check_declared(L, *self.host, self.host->registered.object_types, "object type", object.type,
                 what);
  return OwnObject{rt, std::move(id), std::move(what)};
}

int graph_patch_object(lua_State* L) {
  OwnObject target = own_object(L, "patch_object");
  json patch = object_argument(L, 3, target.what + " patch");
  append_or_raise(L, target.rt, target.what, "patch.applied",
                  json{{"id", target.id}, {"patch", std::move(patch)}}, target.rt.origin().actor);
  return 0;
}

int graph_remove_object(lua_State* L) {
  OwnObject target = own_object(L, "remove_object");
  append_or_raise(L, target.rt, target.what, "object.removed", json{{"id", target.id}},
                  target.rt.origin().actor);
  return 0;
}

int graph_add_relation(lua_State* L) {
  auto [self, rt, what] = begin_mutation(L, "add_relation");
  const std::string src = luaL_checkstring(L, 2);
  const std::string dst = luaL_checkstring(L, 3);
  const std::string type = luaL_checkstring(L, 4);
  live_object(L, rt, src, what + " source");
  live_object(L, rt, dst, what + " target");
  check_declared(L, *self.host, self.host->registered.relation_types, "relation type", type, what);
  json data = object_argument(L, 5, what + " data");
  const std::string id = new_id(L, rt, type, what);
  append_or_raise(
      L, rt, what, "relation.created",
      json{{"id", id}, {"src", src}, {"dst", dst}, {"type", type}, {"data", std::move(data)}},
      rt.origin().actor);
  push_string(L, id);
  return 1;
}

int graph_remove_relation(lua_State* L) {
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

int graph_get(lua_State* L) {
  GraphHandle& self = graph_self(L, "get");
  const Graph& graph = self.host->runtime->graph();
  const std::string id = luaL_checkstring(L, 2);
  if (const GraphObject* object = graph.object(id)) {
    push_object(L, *object);
  } else if (const GraphRelation* relation = graph.relation(id)) {
    push_relation(L, *relation);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

int graph_objects(lua_State* L) {
  GraphHandle& self = graph_self(L, "objects");
  const Graph& graph = self.host->runtime->graph();
  std::optional<std::string> type;
  if (!lua_isnoneornil(L, 2)) type = luaL_checkstring(L, 2);
  const auto objects = graph.objects(type);
  lua_createtable(L, static_cast<int>(objects.size()), 0);
  lua_Integer i = 0;
  for (const GraphObject* object : objects) {
    push_object(L, *object);
    lua_rawseti(L, -2, ++i);
  }
  return 1;
}

int graph_emit(lua_State* L) {
  GraphHandle& self = graph_self(L, "emit");
  RuntimeServices& rt = acting(L, self, "graph:emit");
  push_string(L, emit(L, rt, 2, "graph:emit", rt.origin().actor));
  return 1;
}

}  // namespace

void register_graph_type(lua_State* L) {
  const luaL_Reg methods[] = {
      {"add_object", cxx_boundary<graph_add_object>},
      {"patch_object", cxx_boundary<graph_patch_object>},
      {"remove_object", cxx_boundary<graph_remove_object>},
      {"add_relation", cxx_boundary<graph_add_relation>},
      {"remove_relation", cxx_boundary<graph_remove_relation>},
      {"get", cxx_boundary<graph_get>},
      {"objects", cxx_boundary<graph_objects>},
      {"emit", cxx_boundary<graph_emit>},
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kGraphMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "graph");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
}

void push_graph(lua_State* L, PackHost& host, std::uint64_t invocation) {
  auto* handle = static_cast<GraphHandle*>(lua_newuserdatauv(L, sizeof(GraphHandle), 0));
  *handle = GraphHandle{&host, invocation};
  luaL_setmetatable(L, kGraphMeta);
}

}  // namespace forktrial::runtime
