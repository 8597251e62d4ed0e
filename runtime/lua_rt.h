// The scenario's `rt` (internal to the runtime): rt.run_id, rt.graph (a
// graph handle for the scenario, runtime/lua_graph.h), rt:events([type]),
// rt:emit{}, rt:run_until_idle() and rt:run_goal(text). Its methods act
// through RuntimeServices only while the scenario is the runtime's origin
// (a behavior that got hold of `rt` cannot use them; rt:events reads at any
// time), and those that write or dispatch raise once the runtime refuses to
// act (RuntimeServices::refusal), after a drain as well as before it. The
// API is documented for pack authors in docs/pack-authoring.md.
//
// Each function uses the Lua stack of `L` and can raise, so call it inside
// run_protected (runtime/lua_host.h). The methods keep a pointer to `host`,
// which must outlive the state. Not thread-safe, like the state.
#pragma once

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Registers rt's metatable in the state; once per state, before push_rt.
void register_rt_type(lua_State* L);

// Pushes the `rt` of a scenario of `host` (the candidate).
void push_rt(lua_State* L, PackHost& host);

}  // namespace forktrial::runtime
