// The bytes of what a trial writes: payload keys in the order activegraph's
// builders insert them (its JSON keeps dict order), timestamps as its Clock
// writes them, and a scenario's graph changes under activegraph's builder
// default actor "system".
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Outcome;

namespace {

// The key names of a JSON object's top level, in their written order.
std::vector<std::string> top_keys(const std::string& payload) {
  std::vector<std::string> keys;
  const auto parsed = nlohmann::ordered_json::parse(payload);
  for (const auto& item : parsed.items()) keys.push_back(item.key());
  return keys;
}

}  // namespace

TEST_CASE("a trial writes payloads in activegraph's key order and Clock format",
          "[runtime][activegraph]") {
  TempDir dir;
  PackSpec spec;
  spec.name = "candidate";
  spec.object_types = {"task", "note"};
  spec.relation_types = {"about"};
  spec.behaviors = {"work", "boom"};
  spec.pack_lua = pack_header(spec) + R"(
pack:behavior{ name = "work", on = {"go"}, run = function(event, graph, ctx)
  local n = graph:add_object("note", { zeta = 1, alpha = 2 })
  graph:add_relation("task#1", n, "about", {})
  graph:patch_object(n, { zeta = 3 })
end }
pack:behavior{ name = "boom", on = {"bang"}, run = function(event, graph, ctx)
  error("no")
end }
return pack
)";
  const auto pack = write_pack(dir, "p", spec);
  dir.write("p/s.lua", R"(function main(rt)
  rt.graph:add_object("task", { title = "write" })
  rt:emit{ type = "go" }
  rt:emit{ type = "bang" }
  rt:run_until_idle()
end)");
  auto r = make_runtime();
  load_or_fail(*r, pack);
  REQUIRE(r->rt->run_scenario("s.lua").outcome == Outcome::completed);

  for (const auto& event : r->sunk) {
    INFO(event.type << " " << event.payload);
    REQUIRE(event.timestamp ==
            "1970-01-01T00:00:00Z");  // every ms tick in the epoch's first second
  }

  const auto task = r->of_type("object.created")[0];
  REQUIRE(task.actor == "system");
  REQUIRE(task.payload ==
          R"({"object":{"id":"task#1","type":"task","data":{"title":"write"},"version":1,)"
          R"("provenance":{"created_by":"system","caused_by_event":null,"frame_id":null,)"
          R"("timestamp":"1970-01-01T00:00:00Z","evidence":[],"run_id":"run_fork"}},)"
          R"("id":"task#1"})");
  const auto go = r->of_type("go")[0];
  REQUIRE(go.actor == "scenario");  // rt:emit keeps the scenario's actor

  // A Lua table has no insertion order: user data keys are sorted.
  const auto note = r->of_type("object.created")[1];
  REQUIRE(note.payload ==
          R"({"object":{"id":"note#2","type":"note","data":{"alpha":2,"zeta":1},"version":1,)"
          R"("provenance":{"created_by":"candidate.work","caused_by_event":"evt_003",)"
          R"("frame_id":null,"timestamp":"1970-01-01T00:00:00Z","evidence":[],)"
          R"("run_id":"run_fork"}},"id":"note#2"})");
  REQUIRE(r->of_type("relation.created")[0].payload ==
          R"({"relation":{"id":"rel_001","source":"task#1","target":"note#2","type":"about",)"
          R"("data":{},"provenance":{"created_by":"candidate.work","caused_by_event":"evt_003",)"
          R"("frame_id":null,"timestamp":"1970-01-01T00:00:00Z","evidence":[],)"
          R"("run_id":"run_fork"}},"id":"rel_001","source":"task#1","target":"note#2"})");
  REQUIRE(r->of_type("patch.applied")[0].payload ==
          R"({"patch":{"id":"patch_001","target":"note#2","op":"update","value":{"zeta":3},)"
          R"("expected_version":1,"proposed_by":"candidate.work","rationale":null,)"
          R"("evidence":[],"status":"applied","rejection_reason":null,)"
          R"("provenance":{"created_by":"candidate.work","caused_by_event":"evt_003",)"
          R"("frame_id":null,"timestamp":"1970-01-01T00:00:00Z","evidence":[],)"
          R"("run_id":"run_fork"}},"target":"note#2","diff":{"zeta":{"old":1,"new":3}}})");
  REQUIRE(r->of_type("behavior.started")[0].payload ==
          R"({"behavior":"candidate.work","event_id":"evt_003","triggering_event_type":"go",)"
          R"("triggering_object_id":null})");
  REQUIRE(r->of_type("behavior.completed")[0].payload ==
          R"({"behavior":"candidate.work","event_id":"evt_003","objects_created":1,)"
          R"("relations_created":1,"patches_applied":1,"patches_proposed":0,"events_emitted":0})");
  REQUIRE(top_keys(r->of_type("behavior.failed")[0].payload) ==
          std::vector<std::string>{"behavior", "event_id", "exception_type", "message", "traceback",
                                   "error_type", "pack"});
  const auto idle = r->of_type("runtime.idle")[0].payload;
  REQUIRE(idle.starts_with(R"({"snapshot":{"used":{"max_events":)"));
  REQUIRE(top_keys(nlohmann::ordered_json::parse(idle)["snapshot"].dump()) ==
          std::vector<std::string>{"used", "limits", "cost_used_usd", "cost_limit_usd"});
  REQUIRE(top_keys(nlohmann::ordered_json::parse(idle)["snapshot"]["used"].dump()) ==
          std::vector<std::string>{"max_events", "max_behavior_calls", "max_llm_calls",
                                   "max_tool_calls", "max_patches", "max_depth", "max_seconds",
                                   "max_cost_usd"});
  REQUIRE(top_keys(r->of_type("pack.loaded")[0].payload) ==
          std::vector<std::string>{"name", "version", "description", "object_types",
                                   "relation_types", "behaviors", "tools", "policies", "prompts",
                                   "settings", "capabilities"});
}
