// The `event` table a behavior gets and rt:events() lists (internal to the
// runtime): {id, type, payload, actor, caused_by, timestamp, seq}, with
// `actor` and `caused_by` absent when the event has none.
//
// Uses the Lua stack and can raise (a memory error, or a payload nested
// deeper than runtime/lua_json.h allows), so call it inside a protected call
// or a lua_CFunction. Not thread-safe, like the state it works on.
#pragma once

#include <nlohmann/json.hpp>

#include "store/event.h"

struct lua_State;

namespace forktrial::runtime {

// Pushes the table for `event`, whose parsed payload is `payload`.
void push_event(lua_State* L, const store::Event& event, const nlohmann::ordered_json& payload);

}  // namespace forktrial::runtime
