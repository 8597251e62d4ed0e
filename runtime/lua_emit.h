// Writing events from Lua (internal to the runtime): what every Lua API call
// that writes or dispatches does first, the append that raises its error, and
// the emit{type =, payload =, actor =} spec that graph:emit and rt:emit share.
//
// Each function uses the Lua stack of `L` and raises Lua errors prefixed with
// `what` (the call, e.g. "rt:emit"), so call them only from lua_CFunctions
// registered through cxx_boundary (runtime/lua_host.h). Not thread-safe, like
// the runtime they act on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/runtime_services.h"

struct lua_State;

namespace forktrial::runtime {

// Raises "<what>: <why>" once the runtime refuses to act
// (RuntimeServices::refusal).
void refuse_when_stopped(lua_State* L, const RuntimeServices& rt, const std::string& what);

// Appends the event as the current origin with `actor`; returns its id, or
// raises "<what>: <why nothing was appended>".
std::string append_or_raise(lua_State* L, RuntimeServices& rt, const std::string& what,
                            const std::string& type, const nlohmann::ordered_json& payload,
                            std::string actor);

// Reads the emit spec table at `spec` and appends its event as the current
// origin, the actor defaulting to `default_actor`; returns the event's id.
// Raises, writing nothing, when the spec has unknown fields, the type or an
// actor is not plain text or is reserved (runtime/reserved_names.h, for the
// origin's pack, as a scenario when its invocation is 0), the payload does
// not convert to a JSON object, or the append fails. The caller has checked
// that the origin may act.
std::string emit(lua_State* L, RuntimeServices& rt, int spec, const std::string& what,
                 const std::string& default_actor);

}  // namespace forktrial::runtime
