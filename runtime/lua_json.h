// Converting between JSON payloads and Lua values (internal to the runtime).
//
// JSON -> Lua: objects and arrays become tables (arrays 1-based), strings,
// booleans and numbers map directly (integers stay integers), null becomes nil
// (so a null member disappears from the table). A value nested deeper than
// kMaxJsonDepth levels raises a Lua error instead: the conversion recurses on
// the C stack, and history payloads come from imported runs.
//
// Lua -> JSON: nil -> null, booleans, integers, finite floats, strings (which
// must be valid UTF-8), and tables: a table whose keys are exactly 1..n
// (n >= 1) is an array; any other table must have only string keys and is an
// object; an empty table is the empty object {}. Functions, userdata,
// threads, non-finite numbers, mixed keys and tables nested deeper than
// kMaxTableDepth levels (which includes a table containing itself) are errors
// naming the offending path, e.g. "payload.items[2]: a function cannot be
// converted to JSON". Tables are read raw: metatables are ignored.
//
// The JSON is C++ memory, outside the Lua cap, and a small table can expand
// without bound (a table reached through two references is converted twice).
// A conversion therefore stops after kMaxJsonValues values or kMaxJsonBytes
// bytes of strings and keys; exceeding either is an error naming the path
// where it happened, and is also reported to the state's LuaHost as memory
// that ran out (report_out_of_memory), which stops the runtime.
//
// Both functions use the Lua stack and can raise a Lua memory error, so they
// must run inside a protected call on a state made by new_confined_state.
#pragma once

#include <cstddef>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.h"
#include "store/payload.h"

struct lua_State;

namespace forktrial::runtime {

// JSON handed to Lua nests at most this deep: the store's bound on payloads,
// which history payloads have already passed; this is the last guard.
inline constexpr int kMaxJsonDepth = static_cast<int>(store::kMaxPayloadDepth);
// Tables converted to JSON nest at most this deep.
inline constexpr int kMaxTableDepth = 64;
// One conversion to JSON produces at most this many values (containers
// included) ...
inline constexpr std::size_t kMaxJsonValues = 100'000;
// ... and at most this many bytes of strings and object keys.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{16} << 20;

void push_json(lua_State* L, const nlohmann::ordered_json& value);

std::expected<nlohmann::ordered_json, Status> to_json(lua_State* L, int index,
                                                      std::string_view where);

}  // namespace forktrial::runtime
