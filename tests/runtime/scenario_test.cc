// The scenario driver: spec resolution inside the candidate's root, function
// selection, failures with tracebacks, determinism, and the example packs.
#include <catch2/catch.hpp>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Outcome;
using forktrial::runtime::PackRole;
using nlohmann::json;

namespace {

std::filesystem::path candidate(const TempDir& dir) {
  PackSpec spec;
  spec.object_types = {"note"};
  spec.behaviors = {"noter"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "noter", on = {"goal.created"}, run = function(event, graph, ctx)
  graph:add_object("note", { goal = event.payload.goal, roll = math.random(1000) })
end }
return pack
)";
  const auto root = write_pack(dir, "p", spec);
  dir.write("p/scenarios/s.lua", R"(
function main(rt) rt:run_goal("main") end
function other(rt) rt:run_goal("other") end
function broken(rt) local t = nil; return t.x end
not_a_function = 3
)");
  return root;
}

forktrial::runtime::ScenarioResult run_spec(const std::string& spec) {
  TempDir dir;
  auto r = make_runtime();
  const auto root = candidate(dir);
  dir.write("outside.lua", "function main(rt) end\n");
  dir.write("p/.hidden.lua", "function main(rt) end\n");
  load_or_fail(*r, root);
  return r->rt->run_scenario(spec);
}

}  // namespace

TEST_CASE("scenario paths outside the candidate's root are refused", "[runtime][scenario]") {
  auto absolute = run_spec("/etc/s.lua");
  REQUIRE(absolute.outcome == Outcome::scenario_failed);
  REQUIRE(absolute.message ==
          "scenario path \"/etc/s.lua\" is absolute; give a path relative to the pack root");
  auto parent = run_spec("../outside.lua");
  REQUIRE(parent.outcome == Outcome::scenario_failed);
  REQUIRE(parent.message ==
          "scenario path \"../outside.lua\" leaves the pack root (\"..\" is not allowed)");
  auto hidden = run_spec(".hidden.lua");
  REQUIRE(hidden.outcome == Outcome::scenario_failed);
  REQUIRE(
      hidden.message.starts_with("scenario path \".hidden.lua\" is not a file of the pack at "));
  REQUIRE(hidden.message.ends_with(
      " (files and directories whose names start with '.' are not part of a pack)"));
  auto missing = run_spec("scenarios/none.lua");
  REQUIRE(missing.outcome == Outcome::scenario_failed);
  REQUIRE(missing.message.starts_with(
      "scenario path \"scenarios/none.lua\" is not a file of the pack at "));
  REQUIRE(missing.events_appended == 1);  // pack.loaded only
}

TEST_CASE("file.lua::fn selects the function, and a missing one is named", "[runtime][scenario]") {
  TempDir dir;
  auto r = make_runtime();
  load_or_fail(*r, candidate(dir));
  REQUIRE(r->rt->run_scenario("scenarios/s.lua::other").outcome == Outcome::completed);
  const auto goals = r->of_type("goal.created");
  REQUIRE(goals.size() == 1);
  REQUIRE(payload_of(goals[0]) == json{{"goal", "other"}});
  REQUIRE(goals[0].actor == "user");  // as activegraph's run_goal writes goals

  auto missing = run_spec("scenarios/s.lua::nope");
  REQUIRE(missing.outcome == Outcome::scenario_failed);
  REQUIRE(missing.message ==
          "scenario \"scenarios/s.lua\" defines no function \"nope\"; define function nope(rt) "
          "in it or select another with \"scenarios/s.lua::name\"");
  REQUIRE(run_spec("scenarios/s.lua::not_a_function").outcome == Outcome::scenario_failed);
}

TEST_CASE("a scenario error is scenario_failed with message and traceback", "[runtime][scenario]") {
  const auto result = run_spec("scenarios/s.lua::broken");
  REQUIRE(result.outcome == Outcome::scenario_failed);
  REQUIRE(result.message == "scenarios/s.lua:4: attempt to index a nil value (local 't')");
  REQUIRE(result.traceback.starts_with("stack traceback:"));
  REQUIRE(result.traceback.find("scenarios/s.lua:4: in function <scenarios/s.lua:4>") !=
          std::string::npos);
}

TEST_CASE("a scenario needs a candidate pack", "[runtime][scenario]") {
  auto r = make_runtime();
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::scenario_failed);
  REQUIRE(result.message ==
          "no candidate pack is loaded, so the scenario \"s.lua\" has no pack "
          "root to resolve in");
}

TEST_CASE("the same inputs give the same events byte for byte", "[runtime][scenario]") {
  const auto once = [] {
    TempDir dir;
    std::vector<forktrial::store::Event> history{
        history_event(1, "note.seen", R"({"k":1})", "2024-05-01T12:00:00.123Z")};
    auto r = make_runtime(history);
    const auto root = candidate(dir);
    dir.write("p/scenarios/many.lua", R"(
function main(rt)
  for i = 1, 20 do rt:run_goal("goal " .. i .. " " .. math.random(1000000)) end
end
)");
    load_or_fail(*r, root);
    REQUIRE(r->rt->run_scenario("scenarios/many.lua").outcome == Outcome::completed);
    return r->sunk;
  };
  const auto first = once();
  const auto second = once();
  REQUIRE(first.size() == 101);  // pack.loaded + 20 x (goal, started, note, completed, idle)
  REQUIRE(first == second);
}

TEST_CASE("the greeter example's smoke scenario creates one greeting", "[runtime][examples]") {
  auto r = make_runtime();
  load_or_fail(*r, examples_dir() / "greeter");
  const auto result = r->rt->run_scenario("scenarios/smoke.lua");
  INFO(result.message << "\n" << result.traceback);
  REQUIRE(result.outcome == Outcome::completed);
  const auto greetings = r->rt->graph().objects("greeting");
  REQUIRE(greetings.size() == 1);
  REQUIRE(greetings[0]->data == json{{"text", "Hello, water the plants!"}});
  // One runtime.idle: the second drain found the run already idle.
  REQUIRE(r->types() == std::vector<std::string>{"pack.loaded", "goal.created", "behavior.started",
                                                 "object.created", "behavior.completed",
                                                 "runtime.idle"});
  REQUIRE(r->log ==
          std::vector<std::string>{"[greeter.greeter] greeted goal evt_002 as greeting#1"});
  REQUIRE(result.events_appended == 6);
}

TEST_CASE("chat_echo replays recorded chat messages in their original order",
          "[runtime][examples]") {
  std::vector<forktrial::store::Event> history{
      history_event(1, "session.started", "{}", "2024-05-01T12:00:00Z"),
      history_event(2, "chat.message", R"({"text":"first"})", "2024-05-01T12:00:01Z"),
      history_event(3, "chat.message", R"({"text":"second"})", "2024-05-01T12:00:02Z"),
      history_event(4, "chat.message", R"({"text":"third"})", "2024-05-01T12:00:03Z"),
      // The recorded run drained its queue: nothing is queued again on load.
      history_event(5, "runtime.idle", R"({"snapshot":{}})", "2024-05-01T12:00:04Z")};
  auto r = make_runtime(history);
  load_or_fail(*r, examples_dir() / "chat_echo");
  const auto result = r->rt->run_scenario("scenarios/replay.lua");
  INFO(result.message << "\n" << result.traceback);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 0);
  const auto replayed = r->of_type("chat.message");
  REQUIRE(replayed.size() == 3);
  for (const auto& event : replayed) {
    REQUIRE(event.actor == "trial.replay");
    REQUIRE_FALSE(event.caused_by.has_value());
  }
  std::vector<std::string> replies;
  for (const auto* reply : r->rt->graph().objects("reply")) replies.push_back(reply->data["text"]);
  REQUIRE(replies ==
          std::vector<std::string>{"you said: first", "you said: second", "you said: third"});
  REQUIRE(r->rt->graph().objects("thread").size() == 1);
  REQUIRE(r->rt->graph().relations("in_thread").size() == 3);
  const auto created = r->of_type("object.created");
  REQUIRE(created[0].caused_by == replayed[0].id);
  REQUIRE(created[0].actor == "chat_echo.echo");
}

TEST_CASE("graph changes a scenario makes act as system, its emits as scenario",
          "[runtime][scenario]") {
  TempDir dir;
  auto r = make_runtime();
  const auto root = candidate(dir);
  dir.write("p/scenarios/graph.lua", R"(
function main(rt)
  local n = rt.graph:add_object("note", { goal = "g" })
  rt.graph:patch_object(n, { goal = "h" })
  local p = rt.graph:propose_patch(n, "update", { goal = "i" })
  rt.graph:apply_patch(p)
  rt.graph:remove_object(n)
  rt:emit{ type = "ping" }
end
)");
  load_or_fail(*r, root);
  REQUIRE(r->rt->run_scenario("scenarios/graph.lua").outcome == Outcome::completed);
  // activegraph's graph builders default to actor "system"; its trial child
  // writes a scenario's graph calls with it.
  for (const char* type : {"object.created", "patch.applied", "patch.proposed", "object.removed"}) {
    INFO(type);
    for (const auto& event : r->of_type(type)) REQUIRE(event.actor == "system");
  }
  REQUIRE(r->of_type("patch.applied").size() == 2);
  const json created = payload_of(r->of_type("object.created")[0]);
  REQUIRE(created["object"]["provenance"]["created_by"] == "system");
  const json proposed = payload_of(r->of_type("patch.proposed")[0]);
  REQUIRE(proposed["patch"]["proposed_by"] == "system");
  REQUIRE(payload_of(r->of_type("patch.applied")[1])["approved_by"] == "system");
  REQUIRE(r->of_type("ping")[0].actor == "scenario");
}
