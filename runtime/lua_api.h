// The Lua side of the pack API (internal to the runtime), assembled: what a
// pack's state gets before its entry file runs. Each Lua object is bound in a
// file pair of its own, and reaches the runtime only through RuntimeServices
// (runtime/runtime_services.h):
//   runtime/lua_pack.h     forktrial.pack{}, pack:behavior{}, the returned
//                          pack, a behavior's ctx
//   runtime/lua_globals.h  require, print and ctx.log
//   runtime/lua_graph.h    the graph handle
//   runtime/lua_rt.h       the scenario's rt
// with runtime/lua_event.h (the event table), runtime/lua_emit.h (writing
// events) and runtime/lua_args.h (arguments and errors) shared among them.
// The API itself is documented for pack authors in docs/pack-authoring.md.
//
// Uses the Lua stack and can raise, so call it inside run_protected
// (runtime/lua_host.h). Not thread-safe, like the state.
#pragma once

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Installs `forktrial`, `require` and `print` into the pack's state, and
// registers the types of the graph handle and of rt. `host` must outlive the
// state.
void install_pack_api(lua_State* L, PackHost& host);

}  // namespace forktrial::runtime
