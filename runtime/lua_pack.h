// The pack as Lua sees it (internal to the runtime): `forktrial.pack{}`, which
// an entry file calls once to declare its pack, `pack:behavior{}`, which
// registers behaviors while the entry file runs, the check of the value the
// entry file returns, and the `ctx` a behavior gets. Both record what they
// are given into the PackHost; they never touch the runtime. The API is
// documented for pack authors in docs/pack-authoring.md.
//
// Each function uses the Lua stack of `L` (the pack's state) and can raise,
// so call it inside run_protected (runtime/lua_host.h). The functions
// installed keep a pointer to `host`, which must outlive the state. Not
// thread-safe, like the state.
#pragma once

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Sets the global `forktrial` = {pack = forktrial.pack}. forktrial.pack{}
// raises once the load has finished (host.sealed), when called twice, and on
// a spec it cannot take (not a table, an unknown field, a field of the wrong
// type); pack:behavior{} likewise, and when not called on the pack, when the
// behavior's name is registered twice or is not plain text, or when it lists
// no event type.
void install_forktrial(lua_State* L, PackHost& host);

// Raises unless the value at `index` is the pack made by forktrial.pack{}.
void check_returned_pack(lua_State* L, PackHost& host, int index);

// Pushes a behavior's ctx: {settings (a fresh copy), pack = {name, version},
// event (the value at stack index `event`), log}.
void push_ctx(lua_State* L, PackHost& host, int event);

}  // namespace forktrial::runtime
