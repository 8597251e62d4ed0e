// The confined Lua state: what is absent, text-only load, require limited to
// the pack root, the memory cap, and seeded randomness.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::runtime::PackRole;
using forktrial::runtime::ScenarioOutcome;
using nlohmann::json;

namespace {

std::filesystem::path plain_pack(const TempDir& dir, std::string body = "") {
  PackSpec spec;
  spec.pack_lua = pack_header(spec) + body + "\nreturn pack\n";
  return write_pack(dir, "p", spec);
}

// Adds `lua` to the candidate pack written at `p` as its scenario s.lua,
// loads the candidate and runs the scenario. A pack's files are read when it
// loads, so the scenario is written first.
forktrial::runtime::ScenarioResult run(const TempDir& dir, Recorded& r, std::string_view lua) {
  dir.write("p/s.lua", lua);
  load_or_fail(r, dir.path() / "p");
  return r.rt->run_scenario("s.lua");
}

}  // namespace

TEST_CASE("io, os, debug, package and file loaders are absent", "[runtime][confinement]") {
  TempDir dir;
  auto r = make_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  for _, name in ipairs({ "io", "os", "debug", "package", "dofile", "loadfile" }) do
    assert(_G[name] == nil, name .. " is present")
  end
  assert(string.dump == nil, "string.dump is present")
  for _, name in ipairs({ "table", "string", "math", "utf8", "coroutine" }) do
    assert(type(_G[name]) == "table", name .. " is missing")
  end
  print("visible", 1, nil)
end
)");
  REQUIRE(result.outcome == ScenarioOutcome::completed);
  REQUIRE(result.message.empty());
  REQUIRE(r->log == std::vector<std::string>{"[scenario] visible\\t1\\tnil"});
}

TEST_CASE("load accepts text and refuses binary chunks", "[runtime][confinement]") {
  TempDir dir;
  auto r = make_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  assert(load("return 1 + 1")() == 2)
  local env = { x = 5 }
  assert(load("return x", "chunk", "t", env)() == 5)
  local f, err = load("\27Lua\84\0\25\147\13\10\26\10", "bin", "b")
  assert(f == nil)
  print(err)
  f, err = load("\27Lua\84\0", "bin")
  assert(f == nil)
end
)");
  REQUIRE(result.outcome == ScenarioOutcome::completed);
  REQUIRE(r->log ==
          std::vector<std::string>{"[scenario] attempt to load a binary chunk (mode is 't')"});
}

TEST_CASE("require loads modules from the pack root only", "[runtime][confinement]") {
  TempDir dir;
  const auto pack = plain_pack(dir, "local util = require('lib.util')\nassert(util.twice(2) == 4)");
  dir.write("p/lib/util.lua",
            "loads = (loads or 0) + 1\nreturn { twice = function(n) return n * 2 end }\n");
  dir.write("p/lib/broken.lua", "error('module failed')\n");
  dir.write("outside.lua", "return 1\n");
  dir.write("p/target.lua", "return 2\n");
  dir.write("p/notes.txt", "return 4\n");
  auto r = make_runtime();
  const auto result = run(dir, *r, R"(
function main(rt)
  assert(require("lib.util") == require("lib.util"))
  assert(loads == 1, "a module runs once per state")
  assert(require("target") == 2)
  for _, name in ipairs({ "../outside", "/etc/passwd", "notes", "nope",
                          "lib.broken", "lib.broken", "lib..util" }) do
    local ok, err = pcall(require, name)
    assert(not ok, name)
    print(err)
  end
end
)");
  REQUIRE(result.outcome == ScenarioOutcome::completed);
  const std::string not_in_pack =
      " is not a file of the pack at " + pack.string() +
      " (files and directories whose names start with '.' are not part of a pack)";
  REQUIRE(r->log.size() == 7);
  CHECK(r->log[0] ==
        "[scenario] require(\"../outside\"): module names cannot leave the "
        "pack root (\"..\")");
  CHECK(r->log[1] == "[scenario] require(\"/etc/passwd\"): module names cannot be absolute paths");
  CHECK(r->log[2] == "[scenario] require(\"notes\") file \"notes.lua\"" + not_in_pack);
  CHECK(r->log[3] == "[scenario] require(\"nope\") file \"nope.lua\"" + not_in_pack);
  CHECK(r->log[4] == "[scenario] lib/broken.lua:1: module failed");
  CHECK(r->log[5] == "[scenario] lib/broken.lua:1: module failed");
  CHECK(r->log[6] ==
        "[scenario] require(\"lib..util\"): module names cannot leave the "
        "pack root (\"..\")");
}

TEST_CASE("a pack holding a symlink does not load at all", "[runtime][confinement]") {
  TempDir dir;
  const auto pack = plain_pack(dir);
  dir.write("p/target.lua", "return 2\n");
  REQUIRE(::symlink("target.lua", (pack / "linked.lua").c_str()) == 0);
  auto r = make_runtime();
  auto loaded = r->rt->load_pack(pack, PackRole::candidate);
  REQUIRE_FALSE(loaded);
  REQUIRE(loaded.error().problems ==
          std::vector<std::string>{"linked.lua: symlink to file \"target.lua\"; symlinks are not "
                                   "allowed in a pack: copy the file in [symlink-to-file]"});
  REQUIRE(r->sunk.empty());
}

TEST_CASE("code changed on disk after the pack was read never runs", "[runtime][confinement]") {
  // The pin a trial checks covers the bytes PackFiles::read hashed; the
  // runtime must run those bytes, not whatever the directory holds later.
  TempDir dir;
  const auto pack = plain_pack(dir, "assert(require('lib.mod') == 'hashed')");
  dir.write("p/lib/mod.lua", "return 'hashed'\n");
  dir.write("p/s.lua", "function main(rt) print(require('lib.late')) end\n");
  dir.write("p/lib/late.lua", "return 'hashed late'\n");
  auto files = forktrial::pack::PackFiles::read(pack);
  REQUIRE(files);
  const auto pin = files->bundle_hash();
  dir.write("p/manifest.toml", "not a manifest at all");
  dir.write("p/pack.lua", "error('swapped entry ran')\n");
  dir.write("p/lib/mod.lua", "return 'swapped'\n");
  dir.write("p/lib/late.lua", "return 'swapped late'\n");
  dir.write("p/s.lua", "function main(rt) error('swapped scenario ran') end\n");
  auto r = make_runtime();
  REQUIRE(files->bundle_hash() == pin);
  auto loaded = r->rt->load_pack(std::move(*files), PackRole::candidate);
  if (!loaded) FAIL(loaded.error().message());
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message);
  REQUIRE(result.outcome == ScenarioOutcome::completed);
  REQUIRE(r->log == std::vector<std::string>{"[scenario] hashed late"});
}

TEST_CASE("packs cannot see each other's globals", "[runtime][confinement]") {
  TempDir dir;
  PackSpec extra;
  extra.name = "extra";
  extra.pack_lua = pack_header(extra) + "shared_secret = 42\nreturn pack\n";
  auto r = make_runtime();
  load_or_fail(*r, write_pack(dir, "extra", extra), PackRole::extra);
  plain_pack(dir);
  REQUIRE(run(dir, *r, "function main(rt) assert(shared_secret == nil) end").outcome ==
          ScenarioOutcome::completed);
}

TEST_CASE("a scenario allocating without bound hits the memory cap", "[runtime][confinement]") {
  TempDir dir;
  auto config = test_config();
  config.lua_memory_cap_bytes = 8 << 20;
  auto r = make_runtime({}, config);
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  local hoard = {}
  for i = 1, math.maxinteger do hoard[i] = string.rep("x", 4096) .. i end
end
)");
  REQUIRE(result.outcome == ScenarioOutcome::memory_cap_hit);
  REQUIRE(result.message == "the Lua memory cap of 8388608 bytes was reached: not enough memory");
  REQUIRE(r->rt->memory_cap_hit());
}

TEST_CASE("a behavior hitting the memory cap stops the trial as memory_cap_hit",
          "[runtime][confinement]") {
  TempDir dir;
  auto config = test_config();
  config.lua_memory_cap_bytes = 8 << 20;
  auto r = make_runtime({}, config);
  PackSpec spec;
  spec.behaviors = {"hoard"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "hoard", on = {"go"}, run = function()
  local hoard = {}
  for i = 1, math.maxinteger do hoard[i] = string.rep("y", 4096) .. i end
end }
return pack
)";
  write_pack(dir, "p", spec);
  const auto result = run(dir, *r, R"(
function main(rt)
  rt:emit{ type = "go" }
  rt:emit{ type = "go" }
  rt:run_until_idle()
end
)");
  REQUIRE(result.outcome == ScenarioOutcome::memory_cap_hit);
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  REQUIRE(payload_of(failed[0])["error_type"] == "memory_error");
  REQUIRE(r->of_type("runtime.idle").empty());
}

TEST_CASE("math.random is seeded from the trial id", "[runtime][confinement]") {
  const auto draws = [](const std::string& trial_id) {
    TempDir dir;
    auto config = test_config();
    config.trial_id = trial_id;
    auto r = make_runtime({}, config);
    plain_pack(dir);
    REQUIRE(run(dir, *r, R"(
function main(rt)
  local first = { math.random(1000000), math.random(1000000), math.random() }
  math.randomseed()
  local again = { math.random(1000000), math.random(1000000), math.random() }
  for i = 1, 3 do assert(first[i] == again[i], "randomseed() restores the trial seed") end
  print(first[1], first[2], first[3])
end
)")
                .outcome == ScenarioOutcome::completed);
    return r->log.at(0);
  };
  REQUIRE(draws("trial-a") == draws("trial-a"));
  REQUIRE(draws("trial-a") != draws("trial-b"));
}
