#include "runtime/lua_emit.h"

#include <lua.hpp>
#include <optional>

#include "runtime/lua_args.h"
#include "runtime/pack_host.h"
#include "runtime/reserved_names.h"
#include "store/event.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

void refuse_when_stopped(lua_State* L, const RuntimeServices& rt, const std::string& what) {
  if (auto refusal = rt.refusal()) raise(L, what + ": " + *refusal);
}

std::string append_or_raise(lua_State* L, RuntimeServices& rt, const std::string& what,
                            const std::string& type, const json& payload, std::string actor) {
  auto id = rt.append_as_origin(type, payload, std::move(actor));
  if (!id) raise(L, what + ": " + id.error().message);
  return id->str();
}

std::string emit(lua_State* L, RuntimeServices& rt, int spec, const std::string& what,
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
    const Origin& origin = rt.origin();
    const bool scenario = origin.invocation == 0;
    const auto is_pack = [&rt](std::string_view name) { return rt.is_loaded_pack(name); };
    if (auto reserved = reserved_actor(*actor, origin.pack->name, scenario, is_pack)) {
      raise(L, what + ": " + *reserved);
    }
  }
  return append_or_raise(L, rt, what, type, payload, actor.value_or(default_actor));
}

}  // namespace forktrial::runtime
