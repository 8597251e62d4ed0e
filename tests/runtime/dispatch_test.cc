// The dispatch loop: order, FIFO, failures, budget, idle, ids, clock, and the
// graph API's validation, driven through real packs and scenarios.
#include <catch2/catch.hpp>
#include <iostream>
#include <sstream>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Net;
using forktrial::Outcome;
using forktrial::runtime::PackRole;
using nlohmann::json;

namespace {

PackSpec spec_with(std::string name, std::vector<std::string> behaviors, std::string body,
                   std::vector<std::string> object_types = {}) {
  PackSpec spec;
  spec.name = std::move(name);
  spec.behaviors = std::move(behaviors);
  spec.object_types = std::move(object_types);
  spec.pack_lua = pack_header(spec) + body + "\nreturn pack\n";
  return spec;
}

}  // namespace

TEST_CASE("behaviors run in registration order, extra packs first, events FIFO",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto alpha = write_pack(dir, "alpha", spec_with("alpha", {"relay"}, R"(
pack:behavior{ name = "relay", on = {"ping"}, run = function(event, graph, ctx)
  ctx.log("ping " .. event.payload.n)
  graph:emit{ type = "pong", payload = { n = event.payload.n } }
end }
)"));
  const auto beta = write_pack(dir, "beta", spec_with("beta", {"first", "second", "answer"}, R"(
pack:behavior{ name = "first", on = {"ping"}, run = function(event, graph, ctx)
  ctx.log("ping " .. event.payload.n) end }
pack:behavior{ name = "second", on = "ping", run = function(event, graph, ctx)
  ctx:log("ping " .. event.payload.n) end }
pack:behavior{ name = "answer", on = {"pong"}, run = function(event, graph, ctx)
  ctx.log("pong " .. event.payload.n .. " from " .. event.actor .. " caused by " .. event.caused_by)
end }
)"));
  dir.write("beta/s.lua", R"(
function main(rt)
  rt:emit{ type = "ping", payload = { n = 1 } }
  rt:emit{ type = "ping", payload = { n = 2 } }
  rt:run_until_idle()
end
)");
  auto r = make_runtime();
  load_or_fail(*r, alpha, PackRole::extra);
  load_or_fail(*r, beta, PackRole::candidate);
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(r->log == std::vector<std::string>{
                        "[alpha.relay] ping 1", "[beta.first] ping 1", "[beta.second] ping 1",
                        "[alpha.relay] ping 2", "[beta.first] ping 2", "[beta.second] ping 2",
                        "[beta.answer] pong 1 from alpha.relay caused by evt_003",
                        "[beta.answer] pong 2 from alpha.relay caused by evt_004"});
  REQUIRE(r->work_types() == std::vector<std::string>{"pack.loaded", "pack.loaded", "ping", "ping",
                                                      "pong", "pong", "runtime.idle"});
  const auto pongs = r->of_type("pong");
  REQUIRE(pongs[0].actor == "alpha.relay");
  REQUIRE(pongs[0].caused_by->str() == "evt_003");
  REQUIRE(r->of_type("ping")[0].actor == "scenario");
  REQUIRE_FALSE(r->of_type("ping")[0].caused_by.has_value());
  const json snapshot = payload_of(r->of_type("runtime.idle")[0])["snapshot"];
  REQUIRE(snapshot["used"]["max_events"] == 6.0);
  REQUIRE(snapshot["used"]["max_behavior_calls"] == 8.0);
  REQUIRE(r->of_type("behavior.started").size() == 8);
  REQUIRE(r->of_type("behavior.completed").size() == 8);
  REQUIRE(result.events_appended == 23);
  REQUIRE(result.behavior_failures == 0);
}

TEST_CASE("ids continue the run's counter and times tick from the fork tip",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {}, ""));
  std::vector<forktrial::store::Event> history{
      history_event(1, "chat.message", R"({"text":"a"})", "2024-05-01T12:00:00Z"),
      history_event(2, "chat.message", R"({"text":"b"})", "2024-05-01T12:00:05.250+00:00")};
  history.push_back(history_event(3, "note", "{}", "2024-05-01T12:00:06.999999Z"));
  history[2].id = forktrial::store::EventId("evt_005");  // an imported id in the way
  auto r = make_runtime(history);
  dir.write("p/s.lua", R"(
function main(rt)
  rt:emit{ type = "a" }
  rt:emit{ type = "b" }
end
)");
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  REQUIRE(r->sunk.size() == 3);
  // The counter continues after the highest evt_ number in the history (as
  // activegraph's reseed does), not after the tip's seq.
  REQUIRE(r->sunk[0].id.str() == "evt_006");  // pack.loaded
  REQUIRE(r->sunk[1].id.str() == "evt_007");
  REQUIRE(r->sunk[2].id.str() == "evt_008");
  REQUIRE(r->sunk[0].timestamp == "2024-05-01T12:00:07Z");
  REQUIRE(r->sunk[1].timestamp == "2024-05-01T12:00:07Z");
  REQUIRE(r->sunk[2].timestamp == "2024-05-01T12:00:07Z");
  REQUIRE(r->rt->events().back().seq == 6);
  REQUIRE(r->sunk[1].payload == "{}");
}

TEST_CASE("an empty history starts the clock at the epoch and ids at evt_001",
          "[runtime][dispatch]") {
  TempDir dir;
  auto r = make_runtime();
  load_or_fail(*r, write_pack(dir, "p", spec_with("candidate", {}, "")));
  REQUIRE(r->sunk[0].id.str() == "evt_001");
  REQUIRE(r->sunk[0].timestamp == "1970-01-01T00:00:00Z");
  REQUIRE(r->rt->run_scenario("").outcome == Outcome::completed);
  REQUIRE(r->types() == std::vector<std::string>{"pack.loaded", "runtime.idle"});
}

TEST_CASE("a failing behavior becomes behavior.failed and the loop continues",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p",
                               spec_with("candidate", {"breaks", "survives"}, R"(
local function explode(n)
  error("boom " .. n)
end
pack:behavior{ name = "breaks", on = {"job"}, run = function(event, graph, ctx)
  if event.payload.n == 1 then explode(event.payload.n) end
end }
pack:behavior{ name = "survives", on = {"job"}, run = function(event, graph, ctx)
  graph:add_object("done", { n = event.payload.n })
end }
)",
                                         {"done"}));
  dir.write("p/s.lua", R"(
function main(rt)
  rt:emit{ type = "job", payload = { n = 1 } }
  rt:emit{ type = "job", payload = { n = 2 } }
  rt:run_until_idle()
end
)");
  auto r = make_runtime();
  load_or_fail(*r, pack);
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 1);
  REQUIRE(r->rt->behavior_failures() == 1);
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  REQUIRE(failed[0].caused_by->str() == "evt_002");
  REQUIRE(failed[0].actor == "runtime");
  const json payload = payload_of(failed[0]);
  REQUIRE(payload["behavior"] == "candidate.breaks");
  REQUIRE(payload["pack"] == "candidate");
  REQUIRE(payload["event_id"] == "evt_002");
  REQUIRE(payload["exception_type"] == "LuaError");
  REQUIRE(payload["error_type"] == "runtime_error");
  REQUIRE(payload["message"] == "pack.lua:4: boom 1");
  const std::string traceback = payload["traceback"];
  REQUIRE(traceback.starts_with("stack traceback:"));
  REQUIRE(traceback.find("pack.lua:4: in ") != std::string::npos);
  REQUIRE(traceback.find("pack.lua:7: in ") != std::string::npos);
  REQUIRE(r->rt->graph().objects("done").size() == 2);
  REQUIRE(r->types() == std::vector<std::string>{
                            "pack.loaded", "job", "job", "behavior.started", "behavior.failed",
                            "behavior.started", "object.created", "behavior.completed",
                            "behavior.started", "behavior.completed", "behavior.started",
                            "object.created", "behavior.completed", "runtime.idle"});
}

namespace {

// A pack whose behavior answers every tick with the next one, so only the
// event budget stops it.
std::filesystem::path endless_ticks(const TempDir& dir) {
  return write_pack(dir, "p", spec_with("candidate", {"again"}, R"(
pack:behavior{ name = "again", on = {"tick"}, run = function(event, graph, ctx)
  graph:emit{ type = "tick", payload = { n = event.payload.n + 1 } }
end }
)"));
}

forktrial::runtime::RuntimeConfig budget_of(std::uint64_t max_events) {
  auto config = test_config();
  config.max_events = max_events;
  return config;
}

}  // namespace

TEST_CASE("the event budget stops the loop with one runtime.budget_exhausted",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = endless_ticks(dir);
  dir.write("p/s.lua", R"(
function main(rt)
  rt:emit{ type = "tick", payload = { n = 1 } }
  local ok, err = pcall(rt.run_until_idle, rt)
  assert(not ok)
  assert(string.find(err, "max_events = 5", 1, true), err)
  pcall(rt.run_until_idle, rt)
  while true do rt:emit{ type = "more" } end
end
)");
  auto r = make_runtime({}, budget_of(5));
  load_or_fail(*r, pack);
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::limits_exceeded);
  REQUIRE(result.net == Net::event_budget);
  REQUIRE(result.message ==
          "the event budget ran out after 5 dispatched events (max_events = 5); "
          "runtime.budget_exhausted was emitted");
  const auto exhausted = r->of_type("runtime.budget_exhausted");
  REQUIRE(exhausted.size() == 1);
  const json payload = payload_of(exhausted[0]);
  REQUIRE(payload["exhausted_by"] == "max_events");
  REQUIRE(payload["snapshot"]["used"]["max_events"] == 5.0);
  REQUIRE(payload["snapshot"]["limits"]["max_events"] == 5.0);
  // pack.loaded took one dispatch; the fifth popped event used the budget
  // up, so its behavior did not run (activegraph stops at used >= max).
  REQUIRE(r->of_type("tick").size() == 4);
  REQUIRE(r->of_type("runtime.idle").empty());
  REQUIRE(r->rt->budget_exhausted());
}

TEST_CASE("a scenario that raises after the event budget ran out is scenario_failed",
          "[runtime][dispatch]") {
  // activegraph's child checks runtime.budget_exhausted only when the
  // scenario did not raise.
  TempDir dir;
  const auto pack = endless_ticks(dir);
  dir.write("p/s.lua", R"(
function main(rt)
  rt:emit{ type = "tick", payload = { n = 1 } }
  pcall(rt.run_until_idle, rt)
  error("the candidate gave up")
end
)");
  auto r = make_runtime({}, budget_of(5));
  load_or_fail(*r, pack);
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::scenario_failed);
  REQUIRE(result.net == Net::none);
  REQUIRE(result.message == "s.lua:5: the candidate gave up");
  REQUIRE(r->of_type("runtime.budget_exhausted").size() == 1);
  REQUIRE(r->rt->budget_exhausted());
}

TEST_CASE("using exactly max_events exhausts the budget even with an empty queue",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {}, ""));
  dir.write("p/s.lua", R"(
function main(rt)
  rt:emit{ type = "a" }
  rt:emit{ type = "b" }
  rt:run_until_idle()
  rt:run_until_idle()
end
)");
  auto config = test_config();
  config.max_events = 4;  // pack.loaded, a, b: one short of the budget
  auto r = make_runtime({}, config);
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  // One idle record per idle transition: the second drain found no new work.
  const auto idle = r->of_type("runtime.idle");
  REQUIRE(idle.size() == 1);
  REQUIRE(payload_of(idle[0])["snapshot"]["used"]["max_events"] == 3.0);
  REQUIRE(r->of_type("runtime.budget_exhausted").empty());

  config.max_events = 3;  // activegraph: used >= max is exhaustion, queue empty or not
  auto exact = make_runtime({}, config);
  load_or_fail(*exact, pack);
  REQUIRE(exact->rt->run_scenario("s.lua").outcome == Outcome::limits_exceeded);
  REQUIRE(exact->of_type("runtime.idle").empty());
  REQUIRE(exact->of_type("runtime.budget_exhausted").size() == 1);
}

TEST_CASE("graph mutations project and carry cause and actor", "[runtime][dispatch]") {
  TempDir dir;
  PackSpec spec = spec_with("candidate", {"build"}, R"(
pack:behavior{ name = "build", on = {"go"}, run = function(event, graph, ctx)
  local a = graph:add_object("node", { label = "a" })
  local b = graph:add_object("node", { label = "b" })
  local link = graph:add_relation(a, b, "edge", { weight = 2 })
  graph:patch_object(a, { label = "A", extra = true })
  local got = graph:get(a)
  assert(got.version == 2 and got.data.label == "A" and got.type == "node", "get")
  assert(graph:get(link).source == a and graph:get(link).src == a, "relation get")
  assert(graph:get("node#99") == nil, "missing get")
  graph:remove_object(b)
  assert(graph:get(link) == nil, "cascade")
  ctx.log(a .. " " .. b .. " " .. link .. " " .. #graph:objects() .. " " .. #graph:objects("node"))
end }
)",
                            {"node"});
  spec.relation_types = {"edge"};
  spec.pack_lua = pack_header(spec) + spec.pack_lua.substr(spec.pack_lua.find('\n') + 1);
  const auto pack = write_pack(dir, "p", spec);
  std::vector<forktrial::store::Event> history{
      history_event(1, "object.created",
                    R"({"object":{"id":"node#4","type":"node","data":{"label":"old"},"version":1,)"
                    R"("provenance":{}},"id":"node#4"})")};
  auto r = make_runtime(history);
  dir.write("p/s.lua", "function main(rt) rt:emit{ type = 'go' } rt:run_until_idle() end");
  load_or_fail(*r, pack);
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 0);
  REQUIRE(r->log == std::vector<std::string>{"[candidate.build] node#5 node#6 rel_001 2 2"});
  const auto created = r->of_type("object.created");
  REQUIRE(created[0].actor == "candidate.build");
  REQUIRE(created[0].caused_by->str() == "evt_003");
  const json provenance = {
      {"created_by", "candidate.build"},   {"caused_by_event", "evt_003"}, {"frame_id", nullptr},
      {"timestamp", created[0].timestamp}, {"evidence", json::array()},    {"run_id", "run_fork"}};
  REQUIRE(payload_of(created[0]) == json{{"object",
                                          {{"id", "node#5"},
                                           {"type", "node"},
                                           {"data", {{"label", "a"}}},
                                           {"version", 1},
                                           {"provenance", provenance}}},
                                         {"id", "node#5"}});
  const auto relation = r->of_type("relation.created")[0];
  json relation_provenance = provenance;
  relation_provenance["timestamp"] = relation.timestamp;
  REQUIRE(payload_of(relation) == json{{"relation",
                                        {{"id", "rel_001"},
                                         {"source", "node#5"},
                                         {"target", "node#6"},
                                         {"type", "edge"},
                                         {"data", {{"weight", 2}}},
                                         {"provenance", relation_provenance}}},
                                       {"id", "rel_001"},
                                       {"source", "node#5"},
                                       {"target", "node#6"}});
  const auto patched = r->of_type("patch.applied")[0];
  json patch_provenance = provenance;
  patch_provenance["timestamp"] = patched.timestamp;
  REQUIRE(payload_of(patched) == json{{"patch",
                                       {{"id", "patch_001"},
                                        {"target", "node#5"},
                                        {"op", "update"},
                                        {"value", {{"label", "A"}, {"extra", true}}},
                                        {"expected_version", 1},
                                        {"proposed_by", "candidate.build"},
                                        {"rationale", nullptr},
                                        {"evidence", json::array()},
                                        {"status", "applied"},
                                        {"rejection_reason", nullptr},
                                        {"provenance", patch_provenance}}},
                                      {"target", "node#5"},
                                      {"diff",
                                       {{"label", {{"old", "a"}, {"new", "A"}}},
                                        {"extra", {{"old", nullptr}, {"new", true}}}}}});
  REQUIRE(r->of_type("object.removed")[0].payload == R"({"id":"node#6"})");
  const auto* a = r->rt->graph().object("node#5");
  REQUIRE(a->version == 2);
  REQUIRE(r->rt->graph().relations().empty());
  REQUIRE(r->rt->graph().objects().size() == 2);
}

TEST_CASE("graph misuse raises clear errors inside the behavior", "[runtime][dispatch]") {
  TempDir dir;
  PackSpec spec = spec_with("candidate", {"misuse"}, R"(
local attempts = {
  function(graph) graph:add_object("spaceship", {}) end,
  function(graph) graph:patch_object("node#42", { a = 1 }) end,
  function(graph)
    local a = graph:add_object("node", {})
    local b = graph:add_object("node", {})
    graph:remove_object(b)
    graph:add_relation(a, b, "edge", {})
  end,
  function(graph) graph:add_relation("node#1", "node#1", "friend", {}) end,
  function(graph) graph:emit{ type = "object.created", payload = {} } end,
  function(graph) graph:emit{ type = "x", payload = { f = print } } end,
  function(graph) graph:emit{ type = "x", payload = { n = 1/0 } } end,
  function(graph) graph:emit{ type = "x", payload = { [2] = "b" } } end,
  function(graph) graph:emit{ type = "x", payload = { "list" } } end,
  function(graph) graph:emit{ type = "x", typo = 1 } end,
  function(graph) graph.add_object("node", {}) end,
}
pack:behavior{ name = "misuse", on = {"go"}, run = function(event, graph, ctx)
  for i, attempt in ipairs(attempts) do
    local ok, err = pcall(attempt, graph)
    ctx.log(i .. ": " .. tostring(err))
  end
end }
)",
                            {"node"});
  spec.relation_types = {"edge"};
  spec.pack_lua = pack_header(spec) + spec.pack_lua.substr(spec.pack_lua.find('\n') + 1);
  auto r = make_runtime();
  const auto written = write_pack(dir, "p", spec);
  dir.write("p/s.lua", "function main(rt) rt:emit{ type = 'go' } rt:run_until_idle() end");
  load_or_fail(*r, written);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  REQUIRE(r->log.size() == 11);
  CHECK(r->log[0] ==
        "[candidate.misuse] 1: pack.lua:4: graph:add_object: pack \"candidate\" does not declare "
        "object type \"spaceship\" (declared: node); add it to forktrial.pack{} and to "
        "manifest.toml [surface]");
  CHECK(r->log[1] ==
        "[candidate.misuse] 2: pack.lua:5: graph:patch_object: object \"node#42\" does not exist");
  CHECK(r->log[2] ==
        "[candidate.misuse] 3: pack.lua:10: graph:add_relation target: object \"node#2\" was "
        "removed");
  CHECK(r->log[3] ==
        "[candidate.misuse] 4: pack.lua:12: graph:add_relation: pack \"candidate\" does not "
        "declare relation type \"friend\" (declared: edge); add it to forktrial.pack{} and to "
        "manifest.toml [surface]");
  CHECK(
      r->log[4].find("graph:emit: event type \"object.created\" is written only by the runtime") !=
      std::string::npos);
  CHECK(r->log[5].ends_with(
      "graph:emit payload.f: a function cannot be converted to JSON (only nil, booleans, "
      "numbers, strings and tables can)"));
  CHECK(r->log[6].ends_with(
      "graph:emit payload.n: the number inf is not finite; JSON has no representation for it"));
  CHECK(r->log[7].ends_with(
      "graph:emit payload: table has key 2; a table converts to a JSON array only when its keys "
      "are exactly 1..n, otherwise every key must be a string"));
  CHECK(r->log[8].ends_with(
      "graph:emit payload must be a table with string keys (a JSON object), got a list"));
  CHECK(r->log[9].ends_with(
      "graph:emit: unknown field \"typo\" (known fields: type, payload, actor)"));
  CHECK(r->log[10].ends_with("graph:add_object must be called with ':' (graph:add_object(...))"));
  REQUIRE(r->of_type("x").empty());
  REQUIRE(r->rt->graph().objects().size() == 1);
}

TEST_CASE("payloads convert between JSON and Lua tables", "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {"shape"}, R"(
pack:behavior{ name = "shape", on = {"in"}, run = function(event, graph, ctx)
  local p = event.payload
  graph:emit{ type = "out", payload = {
    list = p.list, empty = {}, nested = { deep = { 1, 2.5, "three", true } },
    int = p.int + 1, float = p.float * 2, text = p.text, missing = p.nothing,
    is_int = math.type(p.int), settings = ctx.settings, pack = ctx.pack,
    same_event = ctx.event == event } }
end }
)"));
  std::vector<forktrial::store::Event> history{
      history_event(1, "in",
                    R"({"list":[3,2,1],"int":41,"float":1.25,"text":"héllo","nothing":null})"),
      history_event(2, "runtime.idle", "{}")};
  auto r = make_runtime(history);
  dir.write("p/s.lua", R"(
function main(rt)
  local recorded = rt:events("in")[1]
  assert(recorded.actor == "recorder" and recorded.seq == 1 and recorded.id == "evt_001")
  rt:emit{ type = "in", payload = recorded.payload, actor = "trial.replay" }
  rt:run_until_idle()
end
)");
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  const auto out = r->of_type("out");
  REQUIRE(out.size() == 1);
  REQUIRE(payload_of(out[0]) == json::parse(R"({
    "list": [3, 2, 1], "empty": {}, "nested": {"deep": [1, 2.5, "three", true]},
    "int": 42, "float": 2.5, "text": "héllo", "is_int": "integer",
    "settings": {}, "pack": {"name": "candidate", "version": "0.1.0"}, "same_event": true})"));
  REQUIRE(r->of_type("in")[0].actor == "trial.replay");
  REQUIRE(r->of_type("in")[0].payload ==
          R"({"float":1.25,"int":41,"list":[3,2,1],"text":"héllo"})");
}

TEST_CASE("a history that cannot be projected or timed is refused", "[runtime][dispatch]") {
  const auto create = [](std::vector<forktrial::store::Event> history) {
    return forktrial::runtime::Runtime::create(test_config(), std::move(history),
                                               [](const forktrial::store::NewEvent&) {});
  };
  auto flat = create({history_event(1, "object.created", R"({"id":"note#1","type":"note"})")});
  REQUIRE_FALSE(flat);
  REQUIRE(flat.error().message ==
          "cannot project event evt_001 (object.created, seq 1) of the fork's history: "
          "payload lacks \"object\"");
  auto not_json = create({history_event(1, "note", "{oops")});
  REQUIRE(not_json.error().message ==
          "event evt_001 (note, seq 1) of the fork's history has a payload that is not JSON");
  const std::string deep = "{\"a\":" + std::string(29'999, '[') + std::string(29'999, ']') + "}";
  auto too_deep = create({history_event(1, "note", deep)});
  REQUIRE(too_deep.error().message ==
          "event evt_001 (note, seq 1) of the fork's history cannot be projected: its payload is "
          "nested 30000 levels deep (arrays and objects); payloads may nest at most 256 levels");
  auto bad_time = create({history_event(1, "note", "{}", "yesterday")});
  REQUIRE(bad_time.error().message.starts_with(
      "the fork tip evt_001 has a bad timestamp: timestamp "
      "\"yesterday\" does not start with YYYY-MM-DDTHH:MM:SS"));
}

TEST_CASE("a failing sink stops the runtime and its exception reaches the caller",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {"chain"}, R"(
pack:behavior{ name = "chain", on = {"go"}, run = function(event, graph, ctx)
  graph:emit{ type = "next" }
end }
)"));
  dir.write("p/s.lua", "function main(rt) rt:emit{ type = 'go' } rt:run_until_idle() end");
  std::vector<std::string> sunk;
  auto rt = forktrial::runtime::Runtime::create(test_config(), {},
                                                [&](const forktrial::store::NewEvent& event) {
                                                  if (event.type == "next")
                                                    throw std::runtime_error("disk full");
                                                  sunk.push_back(event.type);
                                                });
  REQUIRE(rt);
  REQUIRE((*rt)->load_pack(pack, PackRole::candidate));
  REQUIRE_THROWS_WITH((*rt)->run_scenario("s.lua"), "disk full");
  REQUIRE(sunk == std::vector<std::string>{"pack.loaded", "go", "behavior.started"});
  REQUIRE((*rt)->events().size() == 3);
}

TEST_CASE("conversion errors name the first bad member in key order", "[runtime][dispatch]") {
  TempDir dir;
  auto r = make_runtime();
  const auto written = write_pack(dir, "p", spec_with("candidate", {}, ""));
  dir.write("p/s.lua", R"(
function main(rt)
  local payload = {}
  for i = 30, 1, -1 do payload["k" .. string.format("%02d", i)] = print end
  payload[7] = true
  print(select(2, pcall(rt.emit, rt, { type = "x", payload = payload })))
  payload[7] = nil
  print(select(2, pcall(rt.emit, rt, { type = "x", payload = payload })))
  print(select(2, pcall(rt.emit, rt, { type = "x", zz = 1, aa = 2, payload = {} })))
end
)");
  load_or_fail(*r, written);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  REQUIRE(r->log.size() == 3);
  CHECK(
      r->log[0].ends_with("rt:emit payload: table has key 7; a table converts to a JSON array "
                          "only when its keys are exactly 1..n, otherwise every key must be a "
                          "string"));
  CHECK(
      r->log[1].ends_with("rt:emit payload.k01: a function cannot be converted to JSON (only "
                          "nil, booleans, numbers, strings and tables can)"));
  CHECK(r->log[2].ends_with("rt:emit: unknown field \"aa\" (known fields: type, payload, actor)"));
}

TEST_CASE("a behavior error that is not valid UTF-8 is recorded with U+FFFD and the loop goes on",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {"garble", "count"}, R"(
pack:behavior{ name = "garble", on = {"job"}, run = function(event, graph, ctx)
  error("bad \255\254 bytes")
end }
pack:behavior{ name = "count", on = {"job"}, run = function(event, graph, ctx)
  graph:emit{ type = "counted", payload = { n = event.payload.n } }
end }
)"));
  auto r = make_runtime();
  dir.write("p/s.lua",
            "function main(rt) rt:emit{ type = 'job', payload = { n = 1 } } "
            "rt:run_until_idle() end");
  load_or_fail(*r, pack);
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 1);
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  CHECK(payload_of(failed[0])["message"] == "pack.lua:4: bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
  CHECK(r->work_types() ==
        std::vector<std::string>{"pack.loaded", "job", "counted", "runtime.idle"});
}

TEST_CASE("a behavior error beyond the bound is recorded truncated, saying how much was cut",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {"shout"}, R"(
pack:behavior{ name = "shout", on = {"job"}, run = function(event, graph, ctx)
  error(string.rep("x", 2 << 20))
end }
)"));
  auto r = make_runtime();
  dir.write("p/s.lua", "function main(rt) rt:emit{ type = 'job' } rt:run_until_idle() end");
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  const std::string message = payload_of(failed[0])["message"];
  const std::string original = "pack.lua:4: " + std::string(2 << 20, 'x');
  CHECK(message.size() <= 64 * 1024);
  const auto marker = message.rfind(" [... ");
  REQUIRE(marker != std::string::npos);
  CHECK(message.ends_with(" bytes cut]"));
  const std::string kept = message.substr(0, marker);
  CHECK(original.starts_with(kept));
  const auto cut = std::stoull(message.substr(marker + 6));
  CHECK(kept.size() + cut == original.size());
  CHECK(payload_of(failed[0])["traceback"].get<std::string>().starts_with("stack traceback:"));
}

TEST_CASE("print and ctx.log write one escaped, bounded line per call", "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {"talk"}, R"(
pack:behavior{ name = "talk", on = {"go"}, run = function(event, graph, ctx)
  ctx.log("x\r\ny\0z")
  ctx.log(string.rep("y", 1 << 20))
end }
)"));
  auto r = make_runtime();
  dir.write("p/s.lua", R"(
function main(rt)
  print("a\nforktrial-child: b", "\27[31mred")
  print("\255 invalid \194\155")
  rt:emit{ type = "go" }
  rt:run_until_idle()
end
)");
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  REQUIRE(r->log.size() == 4);
  CHECK(r->log[0] == "[scenario] a\\nforktrial-child: b\\t\\x1b[31mred");
  CHECK(r->log[1] == "[scenario] \\xff invalid \\u{9b}");
  CHECK(r->log[2] == "[candidate.talk] x\\r\\ny\\x00z");
  CHECK(r->log[3].starts_with("[candidate.talk] yyyy"));
  CHECK(r->log[3].ends_with(" bytes cut]"));
  CHECK(r->log[3].size() <= 16 * 1024 + 32);
  for (const auto& line : r->log) CHECK(line.find_first_of("\n\r") == std::string::npos);
}

TEST_CASE("the default log sink writes candidate output to stdout, never stderr",
          "[runtime][dispatch]") {
  TempDir dir;
  const auto pack = write_pack(dir, "p", spec_with("candidate", {}, ""));
  dir.write("p/s.lua", "function main(rt) print('hello', 'world') end");
  std::ostringstream out;
  std::ostringstream err;
  struct Restore {
    std::streambuf* out;
    std::streambuf* err;
    ~Restore() {
      std::cout.rdbuf(out);
      std::cerr.rdbuf(err);
    }
  } restore{std::cout.rdbuf(out.rdbuf()), std::cerr.rdbuf(err.rdbuf())};
  auto rt = forktrial::runtime::Runtime::create(test_config(), {},
                                                [](const forktrial::store::NewEvent&) {});
  REQUIRE(rt);
  REQUIRE((*rt)->load_pack(pack, PackRole::candidate));
  REQUIRE((*rt)->run_scenario("s.lua").outcome == Outcome::completed);
  CHECK(out.str() == "[scenario] hello\\tworld\n");
  CHECK(err.str().empty());
}
