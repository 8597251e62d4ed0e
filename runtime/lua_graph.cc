#include "runtime/lua_graph.h"

#include <algorithm>
#include <lua.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/graph_events.h"
#include "runtime/lua_args.h"
#include "runtime/lua_emit.h"
#include "runtime/lua_json.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "runtime/runtime_services.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kGraphMeta = "forktrial.graph";

// The actor of a graph change: the behavior's canonical name, or, for the
// scenario, activegraph's default for its graph builders ("system"), which
// is what its trial child writes when a scenario calls them. Events the
// scenario emits keep the scenario's own actor.
std::string graph_actor(const Origin& origin) {
  return origin.actor == kScenarioActor ? kSystemActor : origin.actor;
}

struct GraphHandle {
  PackHost* host;
  std::uint64_t invocation;
};

void push_object(lua_State* L, const GraphObject& object) {
  lua_createtable(L, 0, 5);
  const int table = lua_gettop(L);
  set_string(L, table, "id", object.id);
  set_string(L, table, "type", object.type);
  push_json(L, object.data);
  lua_setfield(L, table, "data");
  lua_pushinteger(L, static_cast<lua_Integer>(object.version));
  lua_setfield(L, table, "version");
  push_json(L, object.provenance);
  lua_setfield(L, table, "provenance");
}

// source/target as activegraph names them; src/dst kept as aliases for
// packs written against the earlier API.
void push_relation(lua_State* L, const GraphRelation& relation) {
  lua_createtable(L, 0, 8);
  const int table = lua_gettop(L);
  set_string(L, table, "id", relation.id);
  set_string(L, table, "type", relation.type);
  set_string(L, table, "source", relation.source);
  set_string(L, table, "target", relation.target);
  set_string(L, table, "src", relation.source);
  set_string(L, table, "dst", relation.target);
  push_json(L, relation.data);
  lua_setfield(L, table, "data");
  push_json(L, relation.provenance);
  lua_setfield(L, table, "provenance");
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

std::string minted(lua_State* L, std::expected<std::string, Status> id, const std::string& what) {
  if (!id) raise(L, what + ": " + id.error().message);
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
  const std::string id = minted(L, rt.ids().next_object(type), what);
  const std::string actor = graph_actor(rt.origin());
  append_or_raise(L, rt, what, "object.created",
                  object_created(id, type, std::move(data), rt.stamp(actor)), actor);
  ++rt.counters().objects_created;
  push_string(L, id);
  return 1;
}

// An existing object of a type this pack declares, about to be changed.
struct OwnObject {
  RuntimeServices& rt;
  const PackHost& host;
  std::string id;
  std::string what;
};
OwnObject own_object(lua_State* L, const char* method) {
  auto [self, rt, what] = begin_mutation(L, method);
  std::string id = luaL_checkstring(L, 2);
  const GraphObject& object = live_object(L, rt, id, what);
  check_declared(L, *self.host, self.host->registered.object_types, "object type", object.type,
                 what);
  return OwnObject{rt, *self.host, std::move(id), std::move(what)};
}

// The optional options table {rationale =, evidence =} of patch calls.
struct PatchOptions {
  json rationale;
  json evidence = json::array();
};
PatchOptions patch_options(lua_State* L, int index, const std::string& what) {
  PatchOptions out;
  if (lua_isnoneornil(L, index)) return out;
  require_table(L, index, what + " options");
  check_keys(L, index, {"rationale", "evidence"}, what + " options");
  if (auto rationale = string_field(L, index, "rationale", what + " options", false)) {
    out.rationale = *rationale;
  }
  lua_getfield(L, index, "evidence");
  if (!lua_isnil(L, -1)) {
    auto evidence = to_json(L, lua_gettop(L), what + " evidence");
    if (!evidence) raise(L, evidence.error().message);
    if (!evidence->is_array() && !(evidence->is_object() && evidence->empty())) {
      raise(L, what + ": evidence must be a list of event ids");
    }
    if (evidence->is_array()) out.evidence = std::move(*evidence);
  }
  lua_pop(L, 1);
  return out;
}

int graph_patch_object(lua_State* L) {
  OwnObject target = own_object(L, "patch_object");
  json updates = object_argument(L, 3, target.what + " patch");
  PatchOptions options = patch_options(L, 4, target.what);
  RuntimeServices& rt = target.rt;
  const std::string patch_id = minted(L, rt.ids().next_patch(), target.what);
  const std::string actor = graph_actor(rt.origin());
  append_or_raise(
      L, rt, target.what, "patch.applied",
      patch_applied_directly(patch_id, *rt.graph().object(target.id), std::move(updates),
                             rt.stamp(actor), options.rationale, options.evidence),
      actor);
  ++rt.counters().patches_applied;
  push_string(L, patch_id);
  return 1;
}

int graph_propose_patch(lua_State* L) {
  OwnObject target = own_object(L, "propose_patch");
  RuntimeServices& rt = target.rt;
  const std::string op = lua_isnoneornil(L, 3) ? "update" : luaL_checkstring(L, 3);
  if (op != "update" && op != "replace") {
    raise(L, target.what + ": op is \"" + op +
                 "\"; a patch is \"update\" (merge the fields) or \"replace\" (replace the data)");
  }
  json value = object_argument(L, 4, target.what + " value");
  PatchOptions options = patch_options(L, 5, target.what);
  const std::string patch_id = minted(L, rt.ids().next_patch(), target.what);
  const std::string actor = graph_actor(rt.origin());
  append_or_raise(
      L, rt, target.what, "patch.proposed",
      patch_proposed(patch_id, target.id, rt.graph().object(target.id), op, std::move(value),
                     rt.stamp(actor), options.rationale, options.evidence),
      actor);
  ++rt.counters().patches_proposed;
  push_string(L, patch_id);
  return 1;
}

// A proposed patch about to be applied or rejected; its target, if it still
// exists, must be of a type the pack declares.
const GraphPatch& proposed_patch(lua_State* L, const GraphHandle& self, const RuntimeServices& rt,
                                 const std::string& id, const std::string& what) {
  const GraphPatch* patch = rt.graph().patch(id);
  if (patch == nullptr) raise(L, what + ": patch \"" + id + "\" does not exist");
  if (patch->status != "proposed") {
    raise(L, what + ": patch \"" + id + "\" is " + patch->status +
                 "; only a proposed patch can be applied or rejected");
  }
  if (const GraphObject* target = rt.graph().object(patch->target)) {
    check_declared(L, *self.host, self.host->registered.object_types, "object type", target->type,
                   what);
  }
  return *patch;
}

int graph_apply_patch(lua_State* L) {
  auto [self, rt, what] = begin_mutation(L, "apply_patch");
  const std::string id = luaL_checkstring(L, 2);
  const GraphPatch patch = proposed_patch(L, self, rt, id, what);
  const GraphObject* target = rt.graph().object(patch.target);
  const json current = target == nullptr ? json(0) : json(target->version);
  const std::string actor = graph_actor(rt.origin());
  if (current != patch.expected_version) {
    append_or_raise(L, rt, what, "patch.rejected",
                    patch_rejected(patch, target, version_mismatch_reason(patch, target)), actor);
    lua_pushliteral(L, "rejected");
    return 1;
  }
  append_or_raise(L, rt, what, "patch.applied", patch_applied_from_proposal(patch, target, actor),
                  actor);
  lua_pushliteral(L, "applied");
  return 1;
}

int graph_reject_patch(lua_State* L) {
  auto [self, rt, what] = begin_mutation(L, "reject_patch");
  const std::string id = luaL_checkstring(L, 2);
  const std::string reason = luaL_checkstring(L, 3);
  auto checked = to_json(L, 3, what + " reason");  // plain text: valid UTF-8
  if (!checked) raise(L, checked.error().message);
  const GraphPatch patch = proposed_patch(L, self, rt, id, what);
  append_or_raise(L, rt, what, "patch.rejected",
                  patch_rejected(patch, rt.graph().object(patch.target), reason),
                  graph_actor(rt.origin()));
  return 0;
}

int graph_remove_object(lua_State* L) {
  OwnObject target = own_object(L, "remove_object");
  append_or_raise(L, target.rt, target.what, "object.removed", removed(target.id),
                  graph_actor(target.rt.origin()));
  return 0;
}

int graph_add_relation(lua_State* L) {
  auto [self, rt, what] = begin_mutation(L, "add_relation");
  const std::string source = luaL_checkstring(L, 2);
  const std::string target = luaL_checkstring(L, 3);
  const std::string type = luaL_checkstring(L, 4);
  live_object(L, rt, source, what + " source");
  live_object(L, rt, target, what + " target");
  check_declared(L, *self.host, self.host->registered.relation_types, "relation type", type, what);
  json data = object_argument(L, 5, what + " data");
  const std::string id = minted(L, rt.ids().next_relation(), what);
  const std::string actor = graph_actor(rt.origin());
  append_or_raise(L, rt, what, "relation.created",
                  relation_created(id, source, target, type, std::move(data), rt.stamp(actor)),
                  actor);
  ++rt.counters().relations_created;
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
  append_or_raise(L, rt, what, "relation.removed", removed(id), graph_actor(rt.origin()));
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
  } else if (const GraphPatch* patch = graph.patch(id)) {
    push_json(L, patch->to_json());
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
  ++rt.counters().events_emitted;
  return 1;
}

}  // namespace

void register_graph_type(lua_State* L) {
  const luaL_Reg methods[] = {
      {"add_object", cxx_boundary<graph_add_object>},
      {"patch_object", cxx_boundary<graph_patch_object>},
      {"propose_patch", cxx_boundary<graph_propose_patch>},
      {"apply_patch", cxx_boundary<graph_apply_patch>},
      {"reject_patch", cxx_boundary<graph_reject_patch>},
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
