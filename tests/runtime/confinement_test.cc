// The confined Lua state: what is absent, text-only load, require limited to
// the pack root, the memory cap, and seeded randomness.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/runtime/runtime_test_support.h"
#include "tests/support/hostile_lua.h"

using namespace forktrial::testing;
using forktrial::Net;
using forktrial::Outcome;
using forktrial::runtime::PackRole;
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
  REQUIRE(result.outcome == Outcome::completed);
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
  REQUIRE(result.outcome == Outcome::completed);
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
  REQUIRE(result.outcome == Outcome::completed);
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
  if (!loaded) FAIL(loaded.error().message);
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
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
          Outcome::completed);
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
  REQUIRE(result.outcome == Outcome::limits_exceeded);
  REQUIRE(result.net == Net::memory);
  REQUIRE(result.message == "the Lua memory cap of 8388608 bytes was reached: not enough memory");
  REQUIRE(r->rt->memory_cap_hit());
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
                .outcome == Outcome::completed);
    return r->log.at(0);
  };
  REQUIRE(draws("trial-a") == draws("trial-a"));
  REQUIRE(draws("trial-a") != draws("trial-b"));
}

namespace {

std::unique_ptr<Recorded> capped_runtime(std::size_t cap = 8 << 20) {
  auto config = test_config();
  config.lua_memory_cap_bytes = cap;
  return make_runtime({}, config);
}

// Loads a candidate without behaviors into `r` and runs `prelude`, then
// `body` as main(rt) followed by print('survived'), which the tests using
// this expect never to run.
forktrial::runtime::ScenarioResult run_main(const TempDir& dir, Recorded& r,
                                            const std::string& prelude, const std::string& body) {
  plain_pack(dir);
  return run(dir, r, prelude + "function main(rt)\n" + body + "\nprint('survived')\nend\n");
}

}  // namespace

TEST_CASE("a scenario that catches its memory error still ends as memory_cap_hit",
          "[runtime][confinement][memory]") {
  TempDir dir;
  auto r = capped_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, std::string(kHoardLua) + R"(
function main(rt)
  local ok, err = pcall(hoard)
  print("caught: " .. tostring(err))
end
)");
  REQUIRE(result.outcome == Outcome::limits_exceeded);
  REQUIRE(result.net == Net::memory);
  CHECK(result.message == "the Lua memory cap of 8388608 bytes was reached");
  CHECK(r->log.empty());
  CHECK(r->rt->memory_cap_hit());
}

TEST_CASE("a behavior hitting the memory cap stops the trial as memory_cap_hit, caught or not",
          "[runtime][confinement][memory]") {
  const std::string body = GENERATE("hoard()", "pcall(hoard)\nprint('the behavior survived')");
  INFO(body);
  TempDir dir;
  auto r = capped_runtime();
  PackSpec spec;
  spec.behaviors = {"hoard"};
  spec.pack_lua = pack_header(spec) + kHoardLua +
                  "pack:behavior{ name = 'hoard', on = {'go'}, run = function()\n" + body +
                  "\nend }\nreturn pack\n";
  write_pack(dir, "p", spec);
  const auto result = run(dir, *r, R"(
function main(rt)
  rt:emit{ type = "go" }
  rt:emit{ type = "go" }
  pcall(rt.run_until_idle, rt)
  print("the scenario survived")
end
)");
  REQUIRE(result.outcome == Outcome::limits_exceeded);
  REQUIRE(result.net == Net::memory);
  CHECK(r->log.empty());
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  CHECK(payload_of(failed[0])["error_type"] == "memory_error");
  CHECK(r->of_type("runtime.idle").empty());
}

TEST_CASE("once memory ran out, caught errors cannot keep Lua running",
          "[runtime][confinement][memory]") {
  const std::string body = GENERATE(
      "for i = 1, 20 do pcall(hoard) end",
      "for i = 1, 20 do pcall(function() for j = 1, 20 do pcall(hoard) end end) end",
      "local co = coroutine.wrap(function() for i = 1, 20 do pcall(hoard) coroutine.yield() end "
      "end)\nfor i = 1, 20 do pcall(co) end",
      "coroutine.wrap(function() for i = 1, 20 do pcall(hoard) end end)()",
      "local co = coroutine.create(function() pcall(hoard) end)\ncoroutine.resume(co)\n"
      "for i = 1, 20 do coroutine.resume(coroutine.create(function() end)) end");
  INFO(body);
  TempDir dir;
  auto r = capped_runtime();
  const auto result = run_main(dir, *r, kHoardLua, body);
  CHECK(result.outcome == Outcome::limits_exceeded);
  CHECK(result.net == Net::memory);
  CHECK(r->log.empty());
}

TEST_CASE("garbage that reaches the cap while the live data fits does not stop the trial",
          "[runtime][confinement][memory]") {
  TempDir dir;
  auto r = capped_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  local live = {}
  for i = 1, 1500 do live[i] = string.rep("k", 4000) .. i end
  -- strings under lauxlib's 1 KiB buffer, so that every refusal gets Lua's retry
  local churned = 0
  for i = 1, 20000 do
    local garbage = {}
    for j = 1, 4 do garbage[j] = string.rep("g", 1000) .. i .. j end
    churned = churned + #garbage
  end
  print(#live .. " live, " .. churned .. " churned")
end
)");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
  CHECK(r->log == std::vector<std::string>{"[scenario] 1500 live, 80000 churned"});
  CHECK_FALSE(r->rt->memory_cap_hit());
}

TEST_CASE("a payload that expands past the conversion limits ends the trial as memory_cap_hit",
          "[runtime][confinement][memory]") {
  // 20 levels that each point twice at the level below: 2^20 JSON values.
  const std::string emit = GENERATE("rt:emit{ type = 'dag', payload = dag(20) }",
                                    "pcall(rt.emit, rt, { type = 'dag', payload = dag(20) })");
  const std::size_t cap = GENERATE(std::size_t{0}, std::size_t{8} << 20);
  INFO(emit << " with a cap of " << cap);
  TempDir dir;
  auto r = capped_runtime(cap);
  const auto result = run_main(dir, *r, kDagLua, emit);
  CHECK(result.outcome == Outcome::limits_exceeded);
  CHECK(result.net == Net::memory);
  CHECK(result.message.find("more than 100000 values") != std::string::npos);
  CHECK(r->of_type("dag").empty());
  CHECK(r->log.empty());
}

TEST_CASE("coroutine resets nested beyond the guard end as memory_cap_hit",
          "[runtime][confinement][coroutines]") {
  // What resets the coroutines, and the chain that nests the resets 50 deep.
  const auto [resets, chain] = GENERATE(values<std::pair<std::string, std::string>>({
      {"coroutine.close", close_chain(50)},
      {"coroutine.wrap", wrap_chain(50)},
  }));
  INFO(resets);
  TempDir dir;
  auto r = make_runtime();
  const auto result = run_main(dir, *r, "", chain);
  CHECK(result.outcome == Outcome::limits_exceeded);
  CHECK(result.net == Net::memory);
  CHECK(result.message.starts_with(resets));
  CHECK(r->log.empty());
}

TEST_CASE("ordinary coroutine use passes the nesting guard unchanged",
          "[runtime][confinement][coroutines]") {
  TempDir dir;
  auto r = make_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  -- generators nested as deep as Lua's own C-stack limit allows
  local deepest = 0
  local function nest(n)
    deepest = math.max(deepest, n)
    coroutine.wrap(nest)(n + 1)
  end
  local ok, err = pcall(nest, 1)
  print(deepest, err)
  -- a close inside a __close handler, a few levels deep
  local closed = {}
  local function chain(n)
    local co = coroutine.create(function()
      local cc <close> = setmetatable({}, { __close = function()
        closed[#closed + 1] = n
        if n < 3 then chain(n + 1) end
      end })
      coroutine.yield()
    end)
    coroutine.resume(co)
    assert(coroutine.close(co))
  end
  chain(1)
  print(table.concat(closed, ","))
  -- a wrap function whose coroutine died by an error raised through it
  local w = coroutine.wrap(function() error("boom") end)
  print(select(2, pcall(w)))
  print(select(2, pcall(w)))
  -- resume, status and close keep their results
  local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) return b * 2 end)
  print(coroutine.resume(co, 1))
  print(coroutine.status(co), coroutine.resume(co, 5))
  print(coroutine.status(co), coroutine.close(co))
  print(pcall(coroutine.close, coroutine.running()))
  print(pcall(coroutine.resume, 42))
end
)");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(r->log.size() == 9);
  CHECK(r->log[0].starts_with("[scenario] 19"));
  CHECK(r->log[0].ends_with("C stack overflow"));
  CHECK(r->log[1] == "[scenario] 1,2,3");
  CHECK(r->log[2] == "[scenario] s.lua:27: boom");
  CHECK(r->log[3] == "[scenario] cannot resume dead coroutine");
  CHECK(r->log[4] == "[scenario] true\\t2");
  CHECK(r->log[5] == "[scenario] suspended\\ttrue\\t10");
  CHECK(r->log[6] == "[scenario] dead\\ttrue");
  CHECK(r->log[7] == "[scenario] false\\tcannot close a running coroutine");
  CHECK(r->log[8] ==
        "[scenario] false\\tbad argument #1 to 'coroutine.resume' (thread expected, got number)");
}

TEST_CASE("warn writes to the runtime's log, one line per line of the warning",
          "[runtime][confinement]") {
  TempDir dir;
  auto r = make_runtime();
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  warn("@on")
  warn("one ", "message in ", "pieces")
  warn("@off")
  warn("two\nlines")
end
)");
  REQUIRE(result.outcome == Outcome::completed);
  CHECK(r->log == std::vector<std::string>{"[candidate] warning: one message in pieces",
                                           "[candidate] warning: two",
                                           "[candidate] warning: lines"});
}

TEST_CASE("a history payload as deep as the store allows reaches Lua whole",
          "[runtime][confinement]") {
  // Deeper payloads never get this far: the store and Runtime::create refuse
  // them (dispatch_test), and push_json refuses them as a last guard.
  std::string fits;
  for (int i = 0; i < 255; ++i) fits += "[";
  fits = "{\"a\":" + fits + "1" + std::string(255, ']') + "}";
  TempDir dir;
  auto r = make_runtime({history_event(1, "fits", fits)});
  plain_pack(dir);
  const auto result = run(dir, *r, R"(
function main(rt)
  local fits = rt:events("fits")[1].payload
  local depth = 0
  local node = fits.a
  while type(node) == "table" do depth, node = depth + 1, node[1] end
  print(depth, node)
end
)");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
  CHECK(r->log == std::vector<std::string>{"[scenario] 255\\t1"});
}
