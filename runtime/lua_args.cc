#include "runtime/lua_args.h"

#include <algorithm>
#include <cstdlib>
#include <lua.hpp>
#include <vector>

#include "base/text.h"
#include "runtime/lua_json.h"

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

void raise(lua_State* L, const std::string& message) {
  luaL_where(L, 1);
  lua_pushlstring(L, message.data(), message.size());
  lua_concat(L, 2);
  lua_error(L);
  std::abort();  // lua_error does not return
}

PackHost& host_upvalue(lua_State* L) {
  return *static_cast<PackHost*>(lua_touserdata(L, lua_upvalueindex(1)));
}

std::string string_at(lua_State* L, int index) {
  std::size_t length = 0;
  const char* data = lua_tolstring(L, index, &length);
  return std::string(data, length);
}

void require_table(lua_State* L, int index, const std::string& what) {
  if (!lua_istable(L, index)) {
    raise(L, what + " expects a table, got " + luaL_typename(L, index));
  }
}

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
    const std::string key = string_at(L, -1);
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
  std::string value = string_at(L, -1);
  lua_pop(L, 1);
  if (required && value.empty()) raise(L, what + ": field \"" + key + "\" must not be empty");
  return value;
}

json object_argument(lua_State* L, int index, const std::string& what) {
  if (lua_isnoneornil(L, index)) return json::object();
  if (!lua_istable(L, index)) {
    raise(L, what + " must be a table (a JSON object), got " + luaL_typename(L, index));
  }
  auto value = to_json(L, index, what);
  if (!value) raise(L, value.error().message);
  if (!value->is_object()) {
    raise(L, what + " must be a table with string keys (a JSON object), got a list");
  }
  return std::move(*value);
}

void require_event_text(lua_State* L, const std::string& what, std::string_view field,
                        std::string_view value, std::size_t limit, std::string_view why) {
  if (auto problem = named_text_problem("field \"" + std::string(field) + "\"", value, limit)) {
    raise(L, what + ": " + *problem + std::string(why));
  }
}

void push_string(lua_State* L, const std::string& text) {
  lua_pushlstring(L, text.data(), text.size());
}

void set_string(lua_State* L, int table, const char* key, const std::string& value) {
  push_string(L, value);
  lua_setfield(L, table, key);
}

}  // namespace forktrial::runtime
