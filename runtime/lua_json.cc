#include "runtime/lua_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <lua.hpp>
#include <vector>

#include "base/text.h"

namespace forktrial::runtime {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;

std::unexpected<std::string> fail(const std::string& path, std::string_view why) {
  return std::unexpected(path + ": " + std::string(why));
}

std::expected<json, std::string> convert(lua_State* L, int index, const std::string& path,
                                         int depth);

std::expected<json, std::string> convert_table(lua_State* L, int index, const std::string& path,
                                               int depth) {
  if (depth > kMaxDepth) {
    return fail(path, "tables nest deeper than 64 levels (does a table contain itself?)");
  }
  luaL_checkstack(L, 4, "converting a table to JSON");
  // First pass: are the keys exactly 1..n?
  lua_Integer count = 0;
  lua_Integer largest = 0;
  bool all_positive_integers = true;
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    ++count;
    if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1) {
      largest = std::max(largest, lua_tointeger(L, -2));
    } else {
      all_positive_integers = false;
    }
    lua_pop(L, 1);
  }
  if (count > 0 && all_positive_integers && largest == count) {
    json array = json::array();
    for (lua_Integer i = 1; i <= count; ++i) {
      lua_rawgeti(L, index, i);
      auto element = convert(L, lua_gettop(L), path + "[" + std::to_string(i) + "]", depth + 1);
      lua_pop(L, 1);
      if (!element) return element;
      array.push_back(std::move(*element));
    }
    return array;
  }
  // Keys are visited in sorted order, not in the table's internal order
  // (which depends on a per-process hash seed), so that which error is
  // reported is a deterministic function of the table.
  std::vector<std::string> keys;
  std::vector<std::string> bad_keys;
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      std::size_t length = 0;
      const char* data = lua_tolstring(L, -1, &length);
      keys.emplace_back(data, length);
    } else if (lua_type(L, -1) == LUA_TNUMBER) {
      bad_keys.push_back("key " + (lua_isinteger(L, -1) ? std::to_string(lua_tointeger(L, -1))
                                                        : std::to_string(lua_tonumber(L, -1))));
    } else {
      bad_keys.push_back("a " + std::string(luaL_typename(L, -1)) + " key");
    }
  }
  if (!bad_keys.empty()) {
    std::sort(bad_keys.begin(), bad_keys.end());
    return fail(path, "table has " + bad_keys.front() +
                          "; a table converts to a JSON array only when its keys are exactly "
                          "1..n, otherwise every key must be a string");
  }
  std::sort(keys.begin(), keys.end());
  json object = json::object();
  for (const auto& key : keys) {
    if (!is_valid_utf8(key)) return fail(path, "a table key is not valid UTF-8");
    lua_pushlstring(L, key.data(), key.size());
    lua_rawget(L, index);
    auto member = convert(L, lua_gettop(L), path + "." + key, depth + 1);
    lua_pop(L, 1);
    if (!member) return member;
    object[key] = std::move(*member);
  }
  return object;
}

std::expected<json, std::string> convert(lua_State* L, int index, const std::string& path,
                                         int depth) {
  switch (lua_type(L, index)) {
    case LUA_TNIL:
      return json(nullptr);
    case LUA_TBOOLEAN:
      return json(lua_toboolean(L, index) != 0);
    case LUA_TNUMBER: {
      if (lua_isinteger(L, index)) return json(static_cast<std::int64_t>(lua_tointeger(L, index)));
      const double number = lua_tonumber(L, index);
      if (!std::isfinite(number)) {
        return fail(path, "the number " + std::string(std::isnan(number) ? "nan" : "inf") +
                              " is not finite; JSON has no representation for it");
      }
      return json(number);
    }
    case LUA_TSTRING: {
      std::size_t length = 0;
      const char* data = lua_tolstring(L, index, &length);
      std::string text(data, length);
      if (!is_valid_utf8(text)) return fail(path, "the string is not valid UTF-8");
      return json(std::move(text));
    }
    case LUA_TTABLE:
      return convert_table(L, index, path, depth);
    default:
      return fail(path, "a " + std::string(luaL_typename(L, index)) +
                            " cannot be converted to JSON (only nil, booleans, numbers, strings "
                            "and tables can)");
  }
}

}  // namespace

void push_json(lua_State* L, const json& value) {
  luaL_checkstack(L, 3, "converting JSON to Lua");
  switch (value.type()) {
    case json::value_t::null:
    case json::value_t::discarded:
      lua_pushnil(L);
      return;
    case json::value_t::boolean:
      lua_pushboolean(L, value.get<bool>() ? 1 : 0);
      return;
    case json::value_t::number_integer:
      lua_pushinteger(L, static_cast<lua_Integer>(value.get<std::int64_t>()));
      return;
    case json::value_t::number_unsigned: {
      const auto number = value.get<std::uint64_t>();
      if (number <= static_cast<std::uint64_t>(LUA_MAXINTEGER)) {
        lua_pushinteger(L, static_cast<lua_Integer>(number));
      } else {
        lua_pushnumber(L, static_cast<lua_Number>(number));
      }
      return;
    }
    case json::value_t::number_float:
      lua_pushnumber(L, value.get<double>());
      return;
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      lua_pushlstring(L, text.data(), text.size());
      return;
    }
    case json::value_t::binary:
      lua_pushnil(L);
      return;
    case json::value_t::array: {
      lua_createtable(L, static_cast<int>(value.size()), 0);
      lua_Integer i = 0;
      for (const auto& element : value) {
        push_json(L, element);
        lua_rawseti(L, -2, ++i);
      }
      return;
    }
    case json::value_t::object:
      lua_createtable(L, 0, static_cast<int>(value.size()));
      for (const auto& [key, member] : value.items()) {
        lua_pushlstring(L, key.data(), key.size());
        push_json(L, member);
        lua_rawset(L, -3);
      }
      return;
  }
}

std::expected<json, std::string> to_json(lua_State* L, int index, std::string_view where) {
  return convert(L, lua_absindex(L, index), std::string(where), 0);
}

}  // namespace forktrial::runtime
