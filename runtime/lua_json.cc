#include "runtime/lua_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <lua.hpp>
#include <vector>

#include "base/text.h"
#include "runtime/lua_host.h"

namespace forktrial::runtime {
namespace {

using json = nlohmann::ordered_json;

// One step from the converted value down to the value being converted, kept
// on the C++ stack; the path is rendered only for an error.
struct PathStep {
  const PathStep* parent;
  std::string_view key;  // an object member ...
  lua_Integer index;     // ... or, when key is empty and index > 0, an array element
};

// Keys longer than this are shortened in paths.
constexpr std::size_t kMaxKeyInPath = 40;

std::string render_path(std::string_view where, const PathStep* step) {
  std::vector<const PathStep*> steps;
  for (; step != nullptr; step = step->parent) steps.push_back(step);
  std::string out(where);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const PathStep& s = **it;
    if (s.index > 0) {
      out += "[" + std::to_string(s.index) + "]";
      continue;
    }
    out += '.';
    if (s.key.size() <= kMaxKeyInPath) {
      out += s.key;
      continue;
    }
    std::size_t cut = kMaxKeyInPath;  // on a UTF-8 boundary: keys are valid UTF-8 here
    while (cut > 0 && (static_cast<unsigned char>(s.key[cut]) & 0xC0) == 0x80) --cut;
    out += std::string(s.key.substr(0, cut)) + "...";
  }
  return out;
}

class Converter {
 public:
  Converter(lua_State* L, std::string_view where) : L_(L), where_(where) {}

  std::expected<json, Status> convert(int index, const PathStep* path, int depth) {
    if (!take(values_, 1, kMaxJsonValues)) return too_many_values(path);
    switch (lua_type(L_, index)) {
      case LUA_TNIL:
        return json(nullptr);
      case LUA_TBOOLEAN:
        return json(lua_toboolean(L_, index) != 0);
      case LUA_TNUMBER: {
        if (lua_isinteger(L_, index)) {
          return json(static_cast<std::int64_t>(lua_tointeger(L_, index)));
        }
        const double number = lua_tonumber(L_, index);
        if (!std::isfinite(number)) {
          return fail(path, "the number " + std::string(std::isnan(number) ? "nan" : "inf") +
                                " is not finite; JSON has no representation for it");
        }
        return json(number);
      }
      case LUA_TSTRING: {
        std::size_t length = 0;
        const char* data = lua_tolstring(L_, index, &length);
        if (!take(bytes_, length, kMaxJsonBytes)) return too_many_bytes(path);
        std::string text(data, length);
        if (!is_valid_utf8(text)) return fail(path, "the string is not valid UTF-8");
        return json(std::move(text));
      }
      case LUA_TTABLE:
        return convert_table(index, path, depth);
      default:
        return fail(path, "a " + std::string(luaL_typename(L_, index)) +
                              " cannot be converted to JSON (only nil, booleans, numbers, "
                              "strings and tables can)");
    }
  }

 private:
  std::expected<json, Status> convert_table(int index, const PathStep* path, int depth) {
    if (depth > kMaxTableDepth) {
      return fail(path, "tables nest deeper than " + std::to_string(kMaxTableDepth) +
                            " levels (does a table contain itself?)");
    }
    luaL_checkstack(L_, 4, "converting a table to JSON");
    // First pass: are the keys exactly 1..n? And do the members fit?
    lua_Integer count = 0;
    lua_Integer largest = 0;
    bool all_positive_integers = true;
    std::size_t key_bytes = 0;
    lua_pushnil(L_);
    while (lua_next(L_, index) != 0) {
      ++count;
      if (lua_isinteger(L_, -2) && lua_tointeger(L_, -2) >= 1) {
        largest = std::max(largest, lua_tointeger(L_, -2));
      } else {
        all_positive_integers = false;
        if (lua_type(L_, -2) == LUA_TSTRING) key_bytes += lua_rawlen(L_, -2);
      }
      lua_pop(L_, 1);
    }
    if (values_ + static_cast<std::size_t>(count) > kMaxJsonValues) return too_many_values(path);
    if (count > 0 && all_positive_integers && largest == count) {
      json array = json::array();
      for (lua_Integer i = 1; i <= count; ++i) {
        lua_rawgeti(L_, index, i);
        const PathStep step{path, {}, i};
        auto element = convert(lua_gettop(L_), &step, depth + 1);
        lua_pop(L_, 1);
        if (!element) return element;
        array.push_back(std::move(*element));
      }
      return array;
    }
    if (!take(bytes_, key_bytes, kMaxJsonBytes)) return too_many_bytes(path);
    // Keys are visited in sorted order, not in the table's internal order
    // (which depends on a per-process hash seed), so that which error is
    // reported is a deterministic function of the table.
    std::vector<std::string> keys;
    std::vector<std::string> bad_keys;
    lua_pushnil(L_);
    while (lua_next(L_, index) != 0) {
      lua_pop(L_, 1);
      if (lua_type(L_, -1) == LUA_TSTRING) {
        std::size_t length = 0;
        const char* data = lua_tolstring(L_, -1, &length);
        keys.emplace_back(data, length);
      } else if (lua_type(L_, -1) == LUA_TNUMBER) {
        bad_keys.push_back("key " + (lua_isinteger(L_, -1) ? std::to_string(lua_tointeger(L_, -1))
                                                           : std::to_string(lua_tonumber(L_, -1))));
      } else {
        bad_keys.push_back("a " + std::string(luaL_typename(L_, -1)) + " key");
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
      lua_pushlstring(L_, key.data(), key.size());
      lua_rawget(L_, index);
      const PathStep step{path, key, 0};
      auto member = convert(lua_gettop(L_), &step, depth + 1);
      lua_pop(L_, 1);
      if (!member) return member;
      object[key] = std::move(*member);
    }
    return object;
  }

  static bool take(std::size_t& used, std::size_t amount, std::size_t limit) {
    if (amount > limit - used) return false;
    used += amount;
    return true;
  }

  std::unexpected<Status> fail(const PathStep* path, std::string_view why) const {
    return failure(ErrorCode::invalid_argument,
                   render_path(where_, path) + ": " + std::string(why));
  }

  // Past a size limit: the error is also memory that ran out.
  std::unexpected<Status> too_large(const PathStep* path, std::string_view why) const {
    auto error = fail(path, std::string(why) + "; a payload or data value may hold at most " +
                                std::to_string(kMaxJsonValues) + " values and " +
                                std::to_string(kMaxJsonBytes) +
                                " bytes of strings and keys, so make it smaller");
    report_out_of_memory(L_, error.error().message);
    return error;
  }

  std::unexpected<Status> too_many_values(const PathStep* path) const {
    return too_large(path, "converting it to JSON takes more than " +
                               std::to_string(kMaxJsonValues) +
                               " values (a table reached through several references counts "
                               "each time)");
  }

  std::unexpected<Status> too_many_bytes(const PathStep* path) const {
    return too_large(path, "converting it to JSON takes more than " +
                               std::to_string(kMaxJsonBytes) +
                               " bytes of strings and keys (a string reached through several "
                               "references counts each time)");
  }

  lua_State* L_;
  std::string_view where_;
  std::size_t values_ = 0;
  std::size_t bytes_ = 0;
};

// `level` counts the containers around `value`.
void push_value(lua_State* L, const json& value, int level) {
  if (value.is_structured() && level >= kMaxJsonDepth) {
    luaL_error(L,
               "a JSON value nests deeper than %d levels; values handed to Lua nest at most %d "
               "levels deep",
               kMaxJsonDepth, kMaxJsonDepth);
  }
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
        push_value(L, element, level + 1);
        lua_rawseti(L, -2, ++i);
      }
      return;
    }
    case json::value_t::object:
      lua_createtable(L, 0, static_cast<int>(value.size()));
      for (const auto& [key, member] : value.items()) {
        lua_pushlstring(L, key.data(), key.size());
        push_value(L, member, level + 1);
        lua_rawset(L, -3);
      }
      return;
  }
}

}  // namespace

void push_json(lua_State* L, const json& value) {
  push_value(L, value, 0);
}

std::expected<json, Status> to_json(lua_State* L, int index, std::string_view where) {
  return Converter(L, where).convert(lua_absindex(L, index), nullptr, 0);
}

}  // namespace forktrial::runtime
