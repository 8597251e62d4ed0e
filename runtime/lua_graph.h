// The `graph` handle (internal to the runtime): what a behavior gets as its
// `graph` and a scenario as rt.graph. Reads (get, objects) work at any time;
// mutations (add_object, patch_object, remove_object, add_relation,
// remove_relation) and emit only while the run the handle was made for is
// the runtime's origin, and only while the runtime does not refuse to act
// (RuntimeServices::refusal). Mutations change only the types the handle's
// pack declares, and append the graph's events through RuntimeServices, so
// the graph changes only by events. The API is documented for pack authors
// in docs/pack-authoring.md; every refusal raises in Lua and writes nothing.
//
// Each function uses the Lua stack of `L` and can raise, so call it inside
// run_protected (runtime/lua_host.h). A handle keeps a pointer to its pack,
// which must outlive the state. Not thread-safe, like the state.
#pragma once

#include <cstdint>

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Registers the handle's metatable in the state; once per state, before
// push_graph.
void register_graph_type(lua_State* L);

// Pushes a handle of `host`'s pack for the run `invocation` (0 = the
// scenario): its mutations are valid only while that run is the origin.
void push_graph(lua_State* L, PackHost& host, std::uint64_t invocation);

}  // namespace forktrial::runtime
