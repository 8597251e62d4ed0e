// Test support: Lua sources of hostile candidates, shared by the runtime
// tests (in process) and the trial tests (in a real forktrial-child).
#pragma once

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

}  // namespace forktrial::testing
