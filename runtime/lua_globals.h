// The ways in and out of a pack's state that replace Lua's own (internal to
// the runtime): `require`, which loads the pack's own modules from its hashed
// bytes (never the file system), and `print` and `ctx.log`, which write to
// the runtime's log. (`warn` reaches the same log through the LuaHost's
// warning sink.) The API is documented for pack authors in
// docs/pack-authoring.md.
//
// require("a.b") runs a/b.lua from the pack's files once and caches its
// result (true for nil) in the state's registry; it raises for an empty,
// absolute or ".." name, a file the pack does not have, a module that
// requires itself, and whatever the module raises (a failed module may be
// required again). print and ctx.log write one line per call through
// RuntimeServices::log_line, under the acting behavior's actor or
// "scenario" while this pack acts, and under the pack's name otherwise (its
// entry file).
//
// Each function uses the Lua stack of `L` (the pack's state) and can raise,
// so call it inside run_protected (runtime/lua_host.h). The functions
// installed keep a pointer to `host`, which must outlive the state. Not
// thread-safe, like the state.
#pragma once

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Sets the globals `require` and `print`.
void install_require(lua_State* L, PackHost& host);
void install_print(lua_State* L, PackHost& host);

// Pushes the function a behavior's ctx.log is (ctx.log(msg) or ctx:log(msg)).
void push_ctx_log(lua_State* L, PackHost& host);

}  // namespace forktrial::runtime
