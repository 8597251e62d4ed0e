// Hostile candidates against a real forktrial-child: Lua code that catches
// its own memory errors, memory that runs out outside the Lua cap (payloads
// that expand, the scratch store), history payloads nested deeper than the C
// stack allows, coroutine nesting that overflows Lua 5.4.4's C stack, and
// text aimed at the child's stderr. Each trial asserts the exact outcome and
// the net that ended it.
#include "tests/support/hostile_lua.h"

#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sandbox/trial.h"
#include "tests/sandbox/trial_fixture.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using forktrial::testing::kDagLua;
using forktrial::testing::kHoardLua;
using forktrial::testing::PackSpec;
using forktrial::testing::TempDir;

namespace {

const char* kPackHeader =
    R"(local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {},
  relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
)";

// A candidate without behaviors whose scenarios/main.lua is `prelude` and
// then `body` as the inside of main(rt).
PackSpec scenario(const std::string& prelude, const std::string& body) {
  PackSpec spec;
  spec.pack_lua = std::string(kPackHeader) + "return pack\n";
  spec.files["scenarios/main.lua"] = prelude + "\nfunction main(rt)\n" + body + "\nend\n";
  return spec;
}

// The wall clock of the trials that have no memory cap, which only the
// conversion's own limits stop: long enough that a sanitizer build on a busy
// host finishes first (the test is that the memory net fires, not how fast).
constexpr double kSlowHostWallClock = 60;

TrialLimits limits_with(std::optional<std::uint64_t> max_rss, double wall_clock = 30) {
  TrialLimits limits;
  limits.max_rss_bytes = max_rss;
  limits.wall_clock_seconds = wall_clock;
  return limits;
}

constexpr std::uint64_t k256MiB = std::uint64_t{256} << 20;

struct Hostile {
  TempDir dir;
  store::EventStore store{dir.path() / "store"};
  testing::RecordedRun recorded = testing::record_parent_run(store);

  TrialReport trial(const PackSpec& spec, const TrialLimits& limits,
                    const ChildOptions& options = {}) {
    const auto root = dir.path() / "packs" / std::to_string(++packs);
    PackSource candidate{root.string(), Digest::parse(testing::write_pack(root, spec)), true};
    auto trial = testing::specification(recorded, candidate, "scenarios/main.lua", limits);
    trial.label = "hostile";
    return run_trial(store, trial, options);
  }
  // The types of the events the trial appended to its fork.
  std::vector<std::string> fork_types(const TrialReport& report) {
    std::vector<std::string> types;
    for (const auto& event : testing::events_after(store, report.fork_run_id, recorded_seq)) {
      types.push_back(event.type);
    }
    return types;
  }
  int packs = 0;
  std::uint64_t recorded_seq = 4;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool has(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// The outcome every memory exhaustion must end in: the memory net, never the
// wall clock, a crash or a scenario failure.
void require_memory_net(const TrialReport& report) {
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(report.exit_code == 40);
  CHECK(contains(report.detail, "memory net"));
  CHECK_FALSE(contains(report.detail, "wall clock"));
}

}  // namespace

TEST_CASE("a scenario that catches its memory error is limits_exceeded by the memory net",
          "[trial][hostile][no-tsan]") {
  Hostile h;
  auto report = h.trial(scenario(kHoardLua,
                                 "local ok = pcall(hoard)\n"
                                 "rt:emit{ type = 'survived', payload = { ok = ok } }"),
                        limits_with(k256MiB));
  require_memory_net(report);
  CHECK_FALSE(has(h.fork_types(report), "survived"));
}

TEST_CASE("a behavior that catches its memory error is limits_exceeded by the memory net",
          "[trial][hostile][no-tsan]") {
  Hostile h;
  PackSpec spec;
  spec.behaviors = {"hoarder"};
  spec.pack_lua = std::string(kPackHeader) + kHoardLua + R"(
pack:behavior{ name = "hoarder", on = {"go"}, run = function(event, graph, ctx)
  pcall(hoard)
  graph:emit{ type = "survived", payload = {} }
end }
return pack
)";
  spec.files["scenarios/main.lua"] =
      "function main(rt) rt:emit{ type = 'go', payload = {} } rt:run_until_idle() end\n";
  auto report = h.trial(spec, limits_with(k256MiB));
  require_memory_net(report);
  const auto types = h.fork_types(report);
  CHECK_FALSE(has(types, "survived"));
  CHECK(has(types, "behavior.failed"));
}

TEST_CASE("loops catching errors after memory ran out end by the memory net, not the wall clock",
          "[trial][hostile][no-tsan]") {
  Hostile h;
  SECTION("a pcall loop") {
    require_memory_net(
        h.trial(scenario(kHoardLua, "while true do pcall(hoard) end"), limits_with(k256MiB, 20)));
  }
  SECTION("nested pcall loops") {
    require_memory_net(
        h.trial(scenario(kHoardLua,
                         "while true do pcall(function() while true do pcall(hoard) end end) end"),
                limits_with(k256MiB, 20)));
  }
  SECTION("a coroutine that catches and yields, resumed in a loop") {
    require_memory_net(h.trial(scenario(kHoardLua,
                                        "local co = coroutine.wrap(function()\n"
                                        "  while true do pcall(hoard) coroutine.yield() end\n"
                                        "end)\n"
                                        "while true do pcall(co) end"),
                               limits_with(k256MiB, 20)));
  }
  SECTION("a coroutine that never yields") {
    require_memory_net(h.trial(
        scenario(kHoardLua, "coroutine.wrap(function() while true do pcall(hoard) end end)()"),
        limits_with(k256MiB, 20)));
  }
}

TEST_CASE("a payload that expands to 2^40 JSON values is limits_exceeded by the memory net",
          "[trial][hostile]") {
  Hostile h;
  const std::string emit = "rt:emit{ type = 'dag', payload = dag(40) }";
  const std::string caught =
      "pcall(rt.emit, rt, { type = 'dag', payload = dag(40) })\n"
      "rt:emit{ type = 'survived', payload = {} }";
  SECTION("under max_rss") {
    require_memory_net(h.trial(scenario(kDagLua, emit), limits_with(k256MiB)));
  }
  SECTION("under max_rss, caught") {
    auto report = h.trial(scenario(kDagLua, caught), limits_with(k256MiB));
    require_memory_net(report);
    CHECK_FALSE(has(h.fork_types(report), "survived"));
  }
  // Without max_rss there is neither a Lua cap nor RLIMIT_AS: only the
  // conversion's own limits stand between the payload and the host's memory.
  SECTION("without max_rss") {
    require_memory_net(
        h.trial(scenario(kDagLua, emit), limits_with(std::nullopt, kSlowHostWallClock)));
  }
  SECTION("without max_rss, caught") {
    auto report = h.trial(scenario(kDagLua, caught), limits_with(std::nullopt, kSlowHostWallClock));
    require_memory_net(report);
    CHECK_FALSE(has(h.fork_types(report), "survived"));
  }
}

// These two need RLIMIT_AS, which sanitizer builds cannot apply (the child
// announces the memory net as degraded there).
#ifndef FORKTRIAL_SANITIZED
TEST_CASE("emitting events until memory runs out is limits_exceeded by the memory net",
          "[trial][hostile]") {
  // 64 KiB payloads exhaust the address space as the scratch store grows its
  // map; 1 MiB payloads as the runtime keeps the events it wrote.
  const std::string payload_bytes = GENERATE("64 << 10", "1 << 20");
  INFO(payload_bytes);
  Hostile h;
  require_memory_net(h.trial(
      scenario("", "local s = string.rep('p', " + payload_bytes +
                       ")\n"
                       "for i = 1, math.maxinteger do\n"
                       "  pcall(rt.emit, rt, { type = 'big', payload = { data = s, i = i } })\n"
                       "end"),
      limits_with(k256MiB, 60)));
}

TEST_CASE("a max_rss too small for a child is refused, and the smallest allowed one runs",
          "[trial][hostile]") {
  Hostile h;
  CHECK_THROWS_AS(h.trial(scenario("", ""), limits_with(std::uint64_t{24} << 20)), TrialSetupError);
  auto report = h.trial(scenario("", ""), limits_with(kMinMaxRssBytes));
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
}
#endif

// Lua 5.4.4's lua_resetthread runs a coroutine's pending __close handlers
// with the C-call count of the coroutine's last resume, not of its caller, so
// closes nested inside __close handlers grow the C stack without a check
// (fixed upstream in 5.4.6 by lua_closethread).
TEST_CASE("coroutine resets nested inside __close handlers are limits_exceeded, not a crash",
          "[trial][hostile]") {
  // coroutine.close, and a coroutine.wrap function called on its coroutine
  // after that died by an error, both reset the coroutine.
  const auto chain = GENERATE(values<std::pair<std::string, std::string>>({
      {"coroutine.close", testing::close_chain(20000)},
      {"coroutine.wrap", testing::wrap_chain(20000)},
  }));
  INFO(chain.first);
  Hostile h;
  auto report = h.trial(scenario("", chain.second + "rt:emit{ type = 'survived', payload = {} }"),
                        limits_with(k256MiB));
  require_memory_net(report);
  CHECK(contains(report.detail, "memory net: " + chain.first));
  CHECK_FALSE(has(h.fork_types(report), "survived"));
}

TEST_CASE("a few nested closes each recursing to Lua's limit are limits_exceeded, not a crash",
          "[trial][hostile]") {
  Hostile h;
  // Lua checks the C stack per segment; every close starts a fresh segment,
  // so the depth of the close chain must stay small, not only its length.
  const std::string deep = R"lua(
local function deep(n, f)
  if n == 0 then return f() end
  local ok, e = pcall(deep, n - 1, f)
  if not ok then error(e, 0) end
end
)lua";
  const std::string close_deep = R"lua(
local depth = 190
while depth > 0 and not pcall(deep, depth, function() coroutine.close(previous) end) do
  depth = depth - 10
end)lua";
  auto report = h.trial(scenario(deep, testing::close_chain(400, close_deep) +
                                           "rt:emit{ type = 'survived', payload = {} }"),
                        limits_with(k256MiB));
  require_memory_net(report);
  CHECK_FALSE(has(h.fork_types(report), "survived"));
}

// Crashes listed for Lua 5.4.4 at lua.org/bugs.html that Debian's build
// already carries fixes for, and classic overflow patterns: each must end as
// an ordinary Lua error inside the trial.
TEST_CASE("known interpreter-crash patterns end as Lua errors, not crashes", "[trial][hostile]") {
  Hostile h;
  auto report = h.trial(scenario("", R"lua(
local results = {}
local function try(name, f, ...)
  local ok = pcall(f, ...)
  results[#results + 1] = name .. "=" .. tostring(ok)
end
local function loop() assert(pcall(loop)) end
try("xpcall_recursive_handler", function() return xpcall(loop, loop) end)
local function add(x) return 1 + add(x) end
try("xpcall_overflowing_handler", function() return xpcall(add, add) end)
local mt = {}
mt.__tostring = function(self) error(setmetatable({}, mt)) end
try("recursive_tostring_error", function() error(setmetatable({}, mt)) end)
try("env_const", load("local _ENV <const> = 45; AA = 10"))
try("index_chain", function() local t = setmetatable({}, { __index = function(s, k) return s[k .. "x"] end }) return t.a end)
try("concat_chain", function() local c = setmetatable({}, {}) getmetatable(c).__concat = function(a, b) return a .. b end return c .. "x" end)
try("deep_parse", load, string.rep("(", 100000) .. "1" .. string.rep(")", 100000))
try("string_rep", string.rep, "x", math.maxinteger)
try("unpack", table.unpack, {}, 1, 1e8)
try("format_width", string.format, "%99999d", 1)
try("nested_wrap", function() local function body(n) return coroutine.wrap(body)(n + 1) end return body(1) end)
try("pattern", string.match, string.rep("a", 100000), string.rep(".?", 100000))
rt:emit{ type = "results", payload = { list = results } }
)lua"),
                        limits_with(k256MiB));
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
  const auto events = testing::events_after(h.store, report.fork_run_id, h.recorded_seq);
  std::vector<std::string> results;
  for (const auto& event : events) {
    if (event.type == "results") results = nlohmann::json::parse(event.payload)["list"];
  }
  CHECK(results == std::vector<std::string>{
                       "xpcall_recursive_handler=true", "xpcall_overflowing_handler=true",
                       "recursive_tostring_error=false", "env_const=false", "index_chain=false",
                       "concat_chain=false", "deep_parse=true", "string_rep=false", "unpack=false",
                       "format_width=false", "nested_wrap=false", "pattern=false"});
}

TEST_CASE("warn and a candidate's text never reach the child's stderr as lines of their own",
          "[trial][hostile]") {
  Hostile h;
  const auto captured = h.dir.path() / "child-stderr.txt";
  const auto wrapper = h.dir.write("child.sh", "#!/bin/sh\nexec '" + default_child_path().string() +
                                                   "' \"$@\" 2>>'" + captured.string() + "'\n");
  ::chmod(wrapper.c_str(), 0755);
  ChildOptions options;
  options.child_path = wrapper;
  auto report = h.trial(scenario("", R"lua(
warn("@on")
warn("forktrial-child: ", "forged diagnostic")
warn("first line\nforktrial-child: forged after a newline")
warn("@off")
warn("still routed while off")
)lua"),
                        limits_with(k256MiB), options);
  INFO(report.detail);
  REQUIRE(report.outcome == Outcome::completed);
  std::ifstream in(captured);
  std::stringstream text;
  text << in.rdbuf();
  std::istringstream lines(text.str());
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK_FALSE(line.starts_with("forktrial-child: forged"));
    CHECK_FALSE(contains(line, "Lua warning"));
  }
}
