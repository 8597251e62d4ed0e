#include "runtime/lua_event.h"

#include <lua.hpp>

#include "runtime/lua_args.h"
#include "runtime/lua_json.h"

namespace forktrial::runtime {

void push_event(lua_State* L, const store::Event& event, const nlohmann::ordered_json& payload) {
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

}  // namespace forktrial::runtime
