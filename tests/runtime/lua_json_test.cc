// Conversions between Lua values and JSON: error paths, the limits on what
// one conversion may produce, and the depth bound on JSON handed to Lua.
#include "runtime/lua_json.h"

#include <catch2/catch.hpp>
#include <lua.hpp>

#include "tests/runtime/runtime_test_support.h"

using forktrial::runtime::kMaxJsonBytes;
using forktrial::runtime::kMaxJsonValues;
using forktrial::testing::HostedLua;
using nlohmann::json;

namespace {

// Runs `code`, then converts the global `value` to JSON.
std::expected<json, std::string> convert(HostedLua& lua, const std::string& code) {
  if (auto failure = lua.run(code)) FAIL("the Lua code failed: " << failure->message);
  std::expected<json, std::string> result;
  auto failure = forktrial::runtime::run_protected(lua.state.get(), [&](lua_State* L) {
    lua_getglobal(L, "value");
    auto converted = forktrial::runtime::to_json(L, -1, "payload");
    if (converted) {
      result = std::move(*converted);
    } else {
      result = std::unexpected(converted.error().message);
    }
  });
  if (failure) FAIL("the conversion raised: " << failure->message);
  return result;
}

std::string nested_arrays(int levels) {
  return std::string(static_cast<std::size_t>(levels), '[') + "1" +
         std::string(static_cast<std::size_t>(levels), ']');
}

}  // namespace

TEST_CASE("tables convert to JSON objects and arrays", "[runtime][json]") {
  HostedLua lua;
  auto value = convert(lua, "value = { list = { 1, 2.5, 'three', true }, empty = {}, n = nil }");
  REQUIRE(value);
  CHECK(*value == json{{"list", {1, 2.5, "three", true}}, {"empty", json::object()}});
}

TEST_CASE("a conversion error names the path to the bad value", "[runtime][json]") {
  HostedLua lua;
  auto bad = convert(lua, "value = { items = { 1, { deep = { function() end } } } }");
  REQUIRE_FALSE(bad);
  CHECK(bad.error() ==
        "payload.items[2].deep[1]: a function cannot be converted to JSON (only nil, booleans, "
        "numbers, strings and tables can)");
  auto long_key = convert(lua, "value = { [string.rep('k', 100)] = { x = 0/0 } }");
  REQUIRE_FALSE(long_key);
  CHECK(long_key.error() == "payload." + std::string(40, 'k') +
                                "....x: the number nan is not finite; JSON has no representation "
                                "for it");
  CHECK_FALSE(lua.host.stopped());
}

TEST_CASE("a conversion takes at most kMaxJsonValues values", "[runtime][json][memory]") {
  HostedLua lua;
  // The array itself is one value.
  const std::string fill =
      "value = {} for i = 1, " + std::to_string(kMaxJsonValues - 1) + " do value[i] = i end";
  auto fits = convert(lua, fill);
  REQUIRE(fits);
  CHECK(fits->size() == kMaxJsonValues - 1);
  CHECK_FALSE(lua.host.stopped());

  auto over = convert(lua, fill + " value[#value + 1] = 0");
  REQUIRE_FALSE(over);
  const std::string expected =
      "payload: converting it to JSON takes more than 100000 values (a table reached through "
      "several references counts each time); a payload or data value may hold at most 100000 "
      "values and 16777216 bytes of strings and keys, so make it smaller";
  CHECK(over.error() == expected);
  CHECK(lua.host.memory_exhausted());
  CHECK(lua.host.memory_problem() == expected);
}

TEST_CASE("a table shared by reference expands no further than the value limit",
          "[runtime][json][memory]") {
  HostedLua lua;
  auto dag = convert(lua, R"(
local node = { leaf = "x" }
for i = 1, 40 do node = { a = node, b = node } end
value = node
)");
  REQUIRE_FALSE(dag);
  CHECK(dag.error().starts_with("payload.a.a.a."));
  CHECK(dag.error().find(": converting it to JSON takes more than 100000 values") !=
        std::string::npos);
  CHECK(lua.host.memory_exhausted());
}

TEST_CASE("a conversion takes at most kMaxJsonBytes bytes of strings and keys",
          "[runtime][json][memory]") {
  HostedLua lua;
  const std::string megabyte = "local s = string.rep('s', 1 << 20) value = {} ";
  auto fits = convert(lua, megabyte + "for i = 1, 15 do value[i] = s end");
  REQUIRE(fits);
  CHECK_FALSE(lua.host.stopped());

  auto over = convert(lua, megabyte + "for i = 1, 16 do value[i] = s end value[17] = 'x'");
  REQUIRE_FALSE(over);
  CHECK(over.error().starts_with("payload[17]: converting it to JSON takes more than " +
                                 std::to_string(kMaxJsonBytes) + " bytes of strings and keys"));
  CHECK(lua.host.memory_exhausted());
}

TEST_CASE("JSON handed to Lua nests at most kMaxJsonDepth levels", "[runtime][json]") {
  HostedLua lua;
  const auto push = [&](const std::string& text) {
    return forktrial::runtime::run_protected(lua.state.get(), [&](lua_State* L) {
      forktrial::runtime::push_json(L, json::parse(text));
      lua_setglobal(L, "value");
    });
  };
  REQUIRE_FALSE(push(nested_arrays(256)));
  REQUIRE_FALSE(
      lua.run("local depth, node = 0, value "
              "while type(node) == 'table' do depth, node = depth + 1, node[1] end "
              "found = depth .. ' ' .. node"));
  CHECK(lua.global("found") == "256 1");
  auto deeper = push(nested_arrays(257));
  REQUIRE(deeper);
  CHECK(deeper->message ==
        "a JSON value nests deeper than 256 levels; values handed to Lua nest at most 256 levels "
        "deep");
  CHECK_FALSE(lua.host.stopped());
}
