// Converting between JSON payloads and Lua values (internal to the runtime).
//
// JSON -> Lua: objects and arrays become tables (arrays 1-based), strings,
// booleans and numbers map directly (integers stay integers), null becomes nil
// (so a null member disappears from the table).
//
// Lua -> JSON: nil -> null, booleans, integers, finite floats, strings (which
// must be valid UTF-8), and tables: a table whose keys are exactly 1..n
// (n >= 1) is an array; any other table must have only string keys and is an
// object; an empty table is the empty object {}. Functions, userdata,
// threads, non-finite numbers, mixed keys and tables nested deeper than 64
// levels (which includes a table containing itself) are errors naming the
// offending path, e.g. "payload.items[2]: a function cannot be converted to
// JSON". Tables are read raw: metatables are ignored.
//
// Both functions use the Lua stack and can raise a Lua memory error, so they
// must run inside a protected call.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

struct lua_State;

namespace forktrial::runtime {

void push_json(lua_State* L, const nlohmann::json& value);

std::expected<nlohmann::json, std::string> to_json(lua_State* L, int index, std::string_view where);

}  // namespace forktrial::runtime
