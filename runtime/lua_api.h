// The Lua side of the pack API (internal to the runtime): the `forktrial`
// table, pack:behavior, the confined `require`, `print`, and the `graph`,
// `ctx` and `rt` values handed to behaviors and scenarios. The API itself is
// documented for pack authors in docs/pack-authoring.md.
//
// Every function here uses the Lua stack and can raise, so callers run them
// inside run_protected (runtime/lua_host.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "store/event.h"

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Installs `forktrial`, `require` and `print` into the pack's state.
void install_pack_api(lua_State* L, PackHost& host);
// Raises unless the value at `index` is the pack made by forktrial.pack{}.
void check_returned_pack(lua_State* L, PackHost& host, int index);

// {id, type, payload, actor, caused_by, timestamp, seq}
void push_event(lua_State* L, const store::Event& event, const nlohmann::json& payload);
// A graph handle; mutations through it are valid only while `invocation` is
// the runtime's current one (0 = the scenario).
void push_graph(lua_State* L, PackHost& host, std::uint64_t invocation);
// {settings, pack = {name, version}, event, log}; `event` is a stack index.
void push_ctx(lua_State* L, PackHost& host, int event);
// The scenario's `rt`.
void push_rt(lua_State* L, PackHost& host);

}  // namespace forktrial::runtime
