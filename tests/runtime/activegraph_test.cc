// forktrial's runtime against activegraph's event language: a history written
// in activegraph's exact shapes (tests/runtime/data/activegraph_history.jsonl,
// laid out from activegraph's Graph builders) projects here as activegraph
// projects it, what a trial writes replays in an independent re-implementation
// of activegraph's projector (tests/runtime/ag_replayer.py) to the same state,
// ids continue activegraph's counters, and a fork re-queues what its recorded
// run left unhandled.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/runtime/runtime_test_support.h"
#include "tests/support/ag_replay.h"

using namespace forktrial::testing;
using forktrial::Outcome;
using forktrial::runtime::PackRole;
using nlohmann::json;

namespace {

const std::filesystem::path kData =
    std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "tests" / "runtime" / "data";

// An activegraph export (one JSON event per line) as the store returns it.
std::vector<forktrial::store::Event> read_export(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<forktrial::store::Event> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json e = json::parse(line);
    forktrial::store::Event event;
    event.id = forktrial::store::EventId(e["id"].get<std::string>());
    event.type = e["type"];
    event.payload = e["payload"].dump();
    event.timestamp = e["timestamp"];
    if (e["actor"].is_string()) event.actor = e["actor"].get<std::string>();
    if (e["caused_by"].is_string()) {
      event.caused_by = forktrial::store::EventId(e["caused_by"].get<std::string>());
    }
    event.seq = out.size() + 1;
    out.push_back(std::move(event));
  }
  return out;
}

// The state the independent replayer projects from `events`.
nlohmann::ordered_json replayed(const TempDir& dir,
                                const std::vector<forktrial::store::Event>& events) {
  std::string text;
  for (const auto& event : events) {
    text += nlohmann::ordered_json{{"id", event.id.str()},
                                   {"type", event.type},
                                   {"payload", nlohmann::ordered_json::parse(event.payload)}}
                .dump() +
            "\n";
  }
  return ag_replayed(dir, text);
}

PackSpec recorder_pack() {
  PackSpec spec;
  spec.object_types = {"task", "note", "tag"};
  spec.relation_types = {"about"};
  spec.behaviors = {"work"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "work", on = {"go"}, run = function(event, graph, ctx)
  local t = graph:add_object("task", { title = "write", provenance = "dropped" })
  local n = graph:add_object("note", { text = "draft", n = 1 })
  local g = graph:add_object("tag", {})
  graph:add_relation(t, n, "about", { w = 1 })
  graph:add_relation(n, g, "about", {})
  graph:patch_object(t, { status = "open" }, { rationale = "start", evidence = { event.id } })
  local replace = graph:propose_patch(n, "replace", { text = "final" })
  assert(graph:apply_patch(replace) == "applied")
  local stale = graph:propose_patch(t, "update", { status = "closed" })
  graph:patch_object(t, { owner = "me" })
  assert(graph:apply_patch(stale) == "rejected")
  local refused = graph:propose_patch(g, nil, { colour = "red" })
  graph:reject_patch(refused, "not now")
  assert(graph:get(refused).status == "rejected")
  graph:remove_object(g)
end }
return pack
)";
  spec.files["s.lua"] = "function main(rt) rt:emit{ type = 'go' } rt:run_until_idle() end\n";
  return spec;
}

}  // namespace

TEST_CASE("a history in activegraph's shapes projects as activegraph projects it",
          "[runtime][activegraph]") {
  TempDir dir;
  const auto history = read_export(kData / "activegraph_history.jsonl");
  auto r = make_runtime(history);
  const auto& graph = r->rt->graph();
  // The re-put task#1 kept its place and took the new data and version.
  REQUIRE(graph.objects().size() == 2);
  REQUIRE(graph.objects()[0]->id == "task#1");
  REQUIRE(graph.object("task#1")->data == json{{"title", "a2"}});
  REQUIRE(graph.object("task#1")->version == 1);
  REQUIRE(graph.object("note#2") == nullptr);  // removed, taking rel_001 with it
  REQUIRE(graph.relations().size() == 1);
  REQUIRE(graph.relation("rel_002")->target == "ghost#9");  // dangling, kept
  REQUIRE(graph.patch("patch_002")->status == "applied");
  REQUIRE(graph.patch("patch_003")->status == "rejected");
  REQUIRE(graph.patch("patch_003")->rejection_reason == "version mismatch: expected 1, got 2");
  REQUIRE(graph.patch("patch_004")->target == "missing#5");  // no target: recorded only
  require_same_state(graph.to_json(), replayed(dir, history));
}

TEST_CASE("what a trial writes replays in the independent replayer object by object",
          "[runtime][activegraph]") {
  TempDir dir;
  const auto written = write_pack(dir, "p", recorder_pack());
  dir.write("p/s.lua", recorder_pack().files["s.lua"]);
  auto r = make_runtime();
  load_or_fail(*r, written);
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message << result.traceback);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 0);
  const auto ours = r->rt->graph().to_json();
  REQUIRE(ours["objects"].size() == 2);
  // Keys in insertion order: the update merged "owner" in after the others.
  REQUIRE(ours["objects"][0]["data"] ==
          nlohmann::ordered_json{{"title", "write"}, {"status", "open"}, {"owner", "me"}});
  REQUIRE(ours["objects"][0]["version"] == 3);
  REQUIRE(ours["objects"][1]["data"] == nlohmann::ordered_json{{"text", "final"}});
  require_same_state(ours, replayed(dir, r->rt->events()));

  const auto completed = r->of_type("behavior.completed");
  REQUIRE(completed.size() == 1);
  REQUIRE(payload_of(completed[0]) == json{{"behavior", "candidate.work"},
                                           {"event_id", "evt_002"},
                                           {"objects_created", 3},
                                           {"relations_created", 2},
                                           {"patches_applied", 2},
                                           {"patches_proposed", 3},
                                           {"events_emitted", 0}});
  const auto rejected = r->of_type("patch.rejected");
  REQUIRE(rejected.size() == 2);
  REQUIRE(payload_of(rejected[0]) == json{{"patch_id", "patch_003"},
                                          {"target", "task#1"},
                                          {"reason", "version mismatch: expected 2, got 3"},
                                          {"current_version", 3}});
  const auto applied = r->of_type("patch.applied");
  REQUIRE(payload_of(applied[1])["approved_by"] == "candidate.work");
  REQUIRE(payload_of(applied[1])["patch"]["op"] == "replace");
  REQUIRE(payload_of(applied[0])["patch"]["rationale"] == "start");
  REQUIRE(payload_of(applied[0])["patch"]["evidence"] == json{"evt_002"});
}

TEST_CASE("new ids continue every counter of an activegraph history", "[runtime][activegraph]") {
  TempDir dir;
  auto spec = recorder_pack();
  auto r = make_runtime(read_export(kData / "activegraph_history.jsonl"));
  const auto written = write_pack(dir, "p", spec);
  dir.write("p/s.lua", spec.files["s.lua"]);
  load_or_fail(*r, written);
  REQUIRE(r->sunk[0].id.str() == "evt_041");  // after the highest evt_ number, not the seq
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  const auto created = r->of_type("object.created");
  // One object counter over all types, after tag#3.
  REQUIRE(payload_of(created.back())["id"] == "tag#6");
  REQUIRE(payload_of(created[0])["id"] == "task#4");
  REQUIRE(payload_of(r->of_type("relation.created")[0])["id"] == "rel_003");
  REQUIRE(payload_of(r->of_type("patch.applied")[0])["patch"]["id"] ==
          "patch_778");  // patch.rejected of patch_777 counts too
}

TEST_CASE("a fork re-queues the inherited events no behavior handled after the last idle",
          "[runtime][activegraph]") {
  TempDir dir;
  PackSpec spec;
  spec.object_types = {"plan"};
  spec.behaviors = {"plan"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "plan", on = {"goal.created"}, run = function(event, graph, ctx)
  graph:add_object("plan", { goal = event.payload.goal })
end }
return pack
)";
  const auto written = write_pack(dir, "p", spec);
  std::vector<forktrial::store::Event> history{
      history_event(1, "goal.created", R"({"goal":"old"})"),
      history_event(2, "runtime.idle", R"({"snapshot":{}})"),
      history_event(3, "goal.created", R"({"goal":"handled"})"),
      history_event(4, "behavior.started", R"({"behavior":"x.y","event_id":"evt_003"})"),
      history_event(5, "goal.created", R"({"goal":"pending"})"),
      history_event(6, "llm.requested", R"({"behavior":"x.y"})")};
  auto r = make_runtime(history);
  load_or_fail(*r, written);
  REQUIRE(r->rt->run_scenario("").outcome == Outcome::completed);
  const auto plans = r->rt->graph().objects("plan");
  REQUIRE(plans.size() == 1);
  REQUIRE(plans[0]->data == json{{"goal", "pending"}});
  const auto started = r->of_type("behavior.started");
  REQUIRE(started.size() == 1);
  REQUIRE(payload_of(started[0]) == json{{"behavior", "candidate.plan"},
                                         {"event_id", "evt_005"},
                                         {"triggering_event_type", "goal.created"},
                                         {"triggering_object_id", nullptr}});
  REQUIRE(started[0].caused_by->str() == "evt_005");
  // Popped: evt_005 and evt_006 (re-queued: only lifecycle types are
  // skipped, llm.* included), pack.loaded and the plan's object.created.
  const auto idle = payload_of(r->of_type("runtime.idle")[0]);
  REQUIRE(idle["snapshot"]["used"]["max_events"] == 4.0);
}

PackSpec watcher_pack() {
  PackSpec spec;
  spec.behaviors = {"watch"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "watch",
  on = {"dev.probe", "authority.grant", "context.read", "context.viewed", "embedding.done",
        "approval.asked", "pattern.matched"},
  run = function(event, graph, ctx) ctx.log(event.type) end }
return pack
)";
  spec.files["s.lua"] = R"(
function main(rt)
  for _, type in ipairs({"dev.probe", "authority.grant", "context.read", "context.viewed",
                         "embedding.done", "approval.asked", "pattern.matched"}) do
    rt:emit{ type = type, payload = {} }
  end
  rt:run_until_idle()
end
)";
  return spec;
}

TEST_CASE("the queue keeps out the record types activegraph keeps out", "[runtime][activegraph]") {
  TempDir dir;
  auto spec = watcher_pack();
  const auto written = write_pack(dir, "p", spec);
  dir.write("p/s.lua", spec.files["s.lua"]);
  auto r = make_runtime();
  load_or_fail(*r, written);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);
  // dev.*, authority.*, approval.*, pattern.* and the one type context.read
  // are records, not work; other context.* types and embedding.* are work.
  REQUIRE(r->log == std::vector<std::string>{"[candidate.watch] context.viewed",
                                             "[candidate.watch] embedding.done"});
}

TEST_CASE("a fork re-queues what activegraph's loader re-queues, context.read excepted",
          "[runtime][activegraph]") {
  TempDir dir;
  auto spec = watcher_pack();
  const auto written = write_pack(dir, "p", spec);
  // After the last idle: context.read is skipped, as live dispatch skips it;
  // dev.probe is re-queued although live dispatch would not have queued it
  // (activegraph's _requeue_unfired skips only lifecycle records).
  auto r =
      make_runtime({history_event(1, "runtime.idle", R"({"snapshot":{}})"),
                    history_event(2, "context.read", "{}"), history_event(3, "dev.probe", "{}")});
  load_or_fail(*r, written);
  REQUIRE(r->rt->run_scenario("").outcome == Outcome::completed);
  REQUIRE(r->log == std::vector<std::string>{"[candidate.watch] dev.probe"});
}

TEST_CASE("where filters a behavior on payload paths", "[runtime][activegraph]") {
  TempDir dir;
  PackSpec spec;
  spec.behaviors = {"urgent", "bad"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "urgent", on = {"ticket"},
  where = { ["meta.priority"] = { [">="] = 3 }, kind = "bug", ["meta.tags"] = { ["not in"] = {"x"} } },
  run = function(event, graph, ctx) ctx.log("urgent " .. event.payload.n) end }
local ok, err = pcall(pack.behavior, pack, { name = "bad", on = {"ticket"},
  where = { n = { ["~="] = 1 } }, run = function() end })
assert(not ok and string.find(err, "operator \"~=\"", 1, true), err)
pack:behavior{ name = "bad", on = {"never"}, run = function() end }
return pack
)";
  spec.files["s.lua"] = R"(
function main(rt)
  rt:emit{ type = "ticket", payload = { n = 1, kind = "bug", meta = { priority = 5 } } }
  rt:emit{ type = "ticket", payload = { n = 2, kind = "bug", meta = { priority = 2 } } }
  rt:emit{ type = "ticket", payload = { n = 3, kind = "ask", meta = { priority = 9 } } }
  rt:emit{ type = "ticket", payload = { n = 4, kind = "bug" } }
  rt:emit{ type = "ticket", payload = { n = 5, kind = "bug", meta = { priority = true } } }
  rt:run_until_idle()
end
)";
  const auto written = write_pack(dir, "p", spec);
  dir.write("p/s.lua", spec.files["s.lua"]);
  auto r = make_runtime();
  load_or_fail(*r, written);
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message << result.traceback);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(r->log == std::vector<std::string>{"[candidate.urgent] urgent 1"});
}

TEST_CASE("a where filter that Python could not evaluate raises out of run_until_idle",
          "[runtime][activegraph]") {
  // activegraph's Registry.match raises the TypeError of "high" >= 3 out of
  // run_until_idle: the scenario fails unless it catches the error, the
  // event stays popped, and dispatch goes on at the next call.
  TempDir dir;
  PackSpec spec;
  spec.behaviors = {"urgent"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "urgent", on = {"ticket"}, where = { priority = { [">="] = 3 } },
  run = function(event, graph, ctx) ctx.log("urgent " .. event.payload.n) end }
return pack
)";
  spec.files["caught.lua"] = R"(
function main(rt)
  rt:emit{ type = "ticket", payload = { n = 1, priority = "high" } }
  rt:emit{ type = "ticket", payload = { n = 2, priority = 5 } }
  local ok, err = pcall(rt.run_until_idle, rt)
  assert(not ok)
  print("caught: " .. err)
  rt:run_until_idle()
end
)";
  spec.files["uncaught.lua"] = R"(
function main(rt)
  rt:emit{ type = "ticket", payload = { n = 1, priority = "high" } }
  rt:run_until_idle()
end
)";
  const auto written = write_pack(dir, "p", spec);
  dir.write("p/caught.lua", spec.files["caught.lua"]);
  dir.write("p/uncaught.lua", spec.files["uncaught.lua"]);
  const std::string error =
      "rt:run_until_idle raised: the where filter of candidate.urgent on event evt_002 (ticket): "
      "where[\"priority\"] >=: TypeError: '>=' not supported between instances of 'str' and "
      "'int'";
  {
    auto r = make_runtime();
    load_or_fail(*r, written);
    const auto result = r->rt->run_scenario("uncaught.lua");
    REQUIRE(result.outcome == Outcome::scenario_failed);
    REQUIRE_THAT(result.message, Catch::Contains(error));
    REQUIRE(r->of_type("runtime.idle").empty());
  }
  {
    auto r = make_runtime();
    load_or_fail(*r, written);
    const auto result = r->rt->run_scenario("caught.lua");
    INFO(result.message);
    REQUIRE(result.outcome == Outcome::completed);
    REQUIRE(r->log.size() == 2);
    REQUIRE_THAT(r->log[0], Catch::Contains(error));
    REQUIRE(r->log[1] == "[candidate.urgent] urgent 2");
    REQUIRE(r->of_type("runtime.idle").size() == 1);
  }
}
