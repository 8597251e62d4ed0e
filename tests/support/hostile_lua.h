// Test support: Lua sources of hostile candidates, shared by the runtime
// tests (in process) and the trial tests (in a real forktrial-child).
#pragma once

#include <string>
#include <string_view>

namespace forktrial::testing {

// Defines the local function hoard(), which fills the Lua heap with 4 KiB
// strings until the allocator refuses.
inline constexpr const char* kHoardLua = R"(
local function hoard()
  local kept = {}
  for i = 1, math.maxinteger do kept[i] = string.rep("x", 4096) .. i end
end
)";

// Defines the local function dag(levels): a table whose every level points
// twice at the level below, small in Lua but 2^levels values as JSON.
inline constexpr const char* kDagLua = R"(
local function dag(levels)
  local node = { leaf = "x" }
  for i = 1, levels do node = { a = node, b = node } end
  return node
end
)";

// Statements that suspend `levels` coroutines, each with a pending __close
// handler that runs `on_close` (which sees the coroutine before it as
// `previous`, false for the first), then close the last one: with the
// default, coroutine.close nests `levels` deep inside __close handlers.
inline std::string close_chain(int levels,
                               std::string_view on_close = "coroutine.close(previous)") {
  return "local coro = false\n"
         "for i = 1, " +
         std::to_string(levels) +
         " do\n"
         "  local previous = coro\n"
         "  coro = coroutine.create(function()\n"
         "    local cc <close> = setmetatable({}, { __close = function()\n"
         "      if previous then " +
         std::string(on_close) +
         " end\n"
         "    end })\n"
         "    coroutine.yield()\n"
         "  end)\n"
         "  coroutine.resume(coro)\n"
         "end\n"
         "coroutine.close(coro)\n";
}

// Statements that make `levels` coroutine.wrap functions whose coroutines
// died by an error raised through coroutine.resume (which leaves their
// __close handlers pending), each handler calling the previous function, and
// then call the last: the wrap functions reset their coroutines nested
// `levels` deep.
inline std::string wrap_chain(int levels) {
  return "local previous = false\n"
         "for i = 1, " +
         std::to_string(levels) +
         " do\n"
         "  local prev, me = previous, nil\n"
         "  local wrapped = coroutine.wrap(function()\n"
         "    me = coroutine.running()\n"
         "    local cc <close> = setmetatable({}, { __close = function()\n"
         "      if prev then pcall(prev) end\n"
         "    end })\n"
         "    coroutine.yield()\n"
         "    error('dies')\n"
         "  end)\n"
         "  wrapped()\n"
         "  coroutine.resume(me)\n"
         "  previous = wrapped\n"
         "end\n"
         "pcall(previous)\n";
}

}  // namespace forktrial::testing
