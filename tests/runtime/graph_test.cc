// The projector against activegraph's apply_event, one rule per test: the
// payloads are laid out exactly as activegraph's Graph builders write them.
#include "runtime/graph.h"

#include <catch2/catch.hpp>

#include "runtime/id_mint.h"

using forktrial::runtime::Graph;
using forktrial::runtime::IdMint;
using nlohmann::json;

namespace {

json provenance(const char* actor) {
  return {{"created_by", actor},       {"caused_by_event", nullptr},
          {"frame_id", nullptr},       {"timestamp", "2024-05-01T12:00:00Z"},
          {"evidence", json::array()}, {"run_id", "run_x"}};
}

json created(const char* id, const char* type, json data = json::object(), int version = 1) {
  return {{"object",
           {{"id", id},
            {"type", type},
            {"data", std::move(data)},
            {"version", version},
            {"provenance", provenance("system")}}},
          {"id", id}};
}

json related(const char* id, const char* source, const char* target, const char* type) {
  return {{"relation",
           {{"id", id},
            {"source", source},
            {"target", target},
            {"type", type},
            {"data", json::object()},
            {"provenance", provenance("system")}}},
          {"id", id},
          {"source", source},
          {"target", target}};
}

json patch(const char* id, const char* target, const char* op, json value, int expected,
           const char* status) {
  return {{"id", id},
          {"target", target},
          {"op", op},
          {"value", std::move(value)},
          {"expected_version", expected},
          {"proposed_by", "system"},
          {"rationale", nullptr},
          {"evidence", json::array()},
          {"status", status},
          {"rejection_reason", nullptr},
          {"provenance", provenance("system")}};
}

void apply_ok(Graph& graph, const char* type, const json& payload) {
  auto applied = graph.apply(type, payload);
  if (!applied) FAIL(applied.error());
}

std::vector<std::string> object_ids(const Graph& graph, std::optional<std::string_view> type = {}) {
  std::vector<std::string> ids;
  for (const auto* object : graph.objects(type)) ids.push_back(object->id);
  return ids;
}

}  // namespace

TEST_CASE("object.created puts the nested object with its version and provenance",
          "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("task#1", "task", {{"t", "a"}}));
  apply_ok(graph, "object.created", created("note#2", "note", json::object(), 4));
  REQUIRE(object_ids(graph) == std::vector<std::string>{"task#1", "note#2"});
  REQUIRE(object_ids(graph, "note") == std::vector<std::string>{"note#2"});
  REQUIRE(graph.object("task#1")->data == json{{"t", "a"}});
  REQUIRE(graph.object("note#2")->version == 4);
  REQUIRE(graph.object("task#1")->provenance == provenance("system"));
}

TEST_CASE("a flat object.created without the nested object is refused", "[runtime][graph]") {
  Graph graph;
  REQUIRE(graph.apply("object.created", {{"id", "x#1"}, {"type", "x"}, {"data", json::object()}})
              .error()
              .message == "payload lacks \"object\"");
  json missing = created("x#1", "x");
  missing["object"].erase("provenance");
  REQUIRE(graph.apply("object.created", missing).error().message ==
          "payload.object lacks \"provenance\"");
  REQUIRE(graph.objects().empty());
}

TEST_CASE("object.created of an id already present overwrites it in place", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("a#1", "a", {{"v", 1}}));
  apply_ok(graph, "object.created", created("b#2", "b"));
  apply_ok(graph, "object.created", created("a#1", "a", {{"v", 2}}));
  REQUIRE(object_ids(graph) == std::vector<std::string>{"a#1", "b#2"});
  REQUIRE(graph.object("a#1")->data == json{{"v", 2}});
  // Removed and put again, it goes to the end, like a Python dict key.
  apply_ok(graph, "object.removed", {{"id", "a#1"}});
  apply_ok(graph, "object.created", created("a#1", "a"));
  REQUIRE(object_ids(graph) == std::vector<std::string>{"b#2", "a#1"});
  REQUIRE_FALSE(graph.was_removed("a#1"));
}

TEST_CASE("relations may dangle and object.removed cascades by id", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("a#1", "a"));
  apply_ok(graph, "relation.created", related("rel_001", "a#1", "ghost#9", "link"));
  apply_ok(graph, "relation.created", related("rel_002", "ghost#8", "a#1", "link"));
  apply_ok(graph, "relation.created", related("rel_003", "x#4", "y#5", "link"));
  REQUIRE(graph.relation("rel_001")->target == "ghost#9");
  apply_ok(graph, "object.removed", {{"id", "a#1"}});
  REQUIRE(graph.relation("rel_001") == nullptr);
  REQUIRE(graph.relation("rel_002") == nullptr);
  // An id that never was an object still takes its relations with it.
  apply_ok(graph, "object.removed", {{"id", "y#5"}});
  REQUIRE(graph.relations().empty());
  REQUIRE(graph.was_removed("rel_003"));
}

TEST_CASE("relation.removed and object.removed of unknown ids change nothing", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("a#1", "a"));
  apply_ok(graph, "relation.created", related("rel_001", "a#1", "a#1", "self"));
  apply_ok(graph, "relation.removed", {{"id", "rel_999"}});
  apply_ok(graph, "object.removed", {{"id", "nobody#1"}});
  apply_ok(graph, "relation.removed", {{"id", "rel_001"}});
  apply_ok(graph, "relation.removed", {{"id", "rel_001"}});
  REQUIRE(graph.relations().empty());
  REQUIRE(graph.objects().size() == 1);
  REQUIRE(graph.apply("relation.removed", json::object()).error().message ==
          "payload lacks \"id\"");
}

TEST_CASE("patch.applied with op update merges and bumps the version", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("n#1", "n", {{"a", 1}, {"b", {{"x", 1}}}}));
  apply_ok(
      graph, "patch.applied",
      {{"patch", patch("patch_001", "n#1", "update", {{"b", {{"y", 2}}}, {"c", 3}}, 1, "applied")},
       {"target", "n#1"},
       {"diff", json::object()}});
  const auto* n = graph.object("n#1");
  REQUIRE(n->version == 2);
  REQUIRE(n->data == json{{"a", 1}, {"b", {{"y", 2}}}, {"c", 3}});
  REQUIRE(graph.patch("patch_001")->status == "applied");
}

TEST_CASE("patch.applied with op replace replaces the data", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", created("n#1", "n", {{"a", 1}, {"b", 2}}));
  apply_ok(graph, "patch.proposed",
           {{"patch", patch("patch_001", "n#1", "replace", {{"c", 3}}, 1, "proposed")}});
  REQUIRE(graph.patch("patch_001")->status == "proposed");
  REQUIRE(graph.object("n#1")->version == 1);
  apply_ok(graph, "patch.applied",
           {{"patch", patch("patch_001", "n#1", "replace", {{"c", 3}}, 1, "proposed")},
            {"target", "n#1"},
            {"diff", json::object()},
            {"approved_by", "system"}});
  REQUIRE(graph.object("n#1")->data == json{{"c", 3}});
  REQUIRE(graph.object("n#1")->version == 2);
  // The status is "applied" whatever the payload's record said.
  REQUIRE(graph.patch("patch_001")->status == "applied");
}

TEST_CASE("patch.applied on a missing target records the patch only", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "patch.applied",
           {{"patch", patch("patch_004", "gone#5", "update", {{"x", 1}}, 1, "applied")},
            {"target", "gone#5"},
            {"diff", json::object()}});
  REQUIRE(graph.objects().empty());
  REQUIRE(graph.patch("patch_004")->target == "gone#5");
}

TEST_CASE("patch.rejected marks a known patch and ignores an unknown one", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "patch.proposed",
           {{"patch", patch("patch_001", "n#1", "update", json::object(), 1, "proposed")}});
  apply_ok(
      graph, "patch.rejected",
      {{"patch_id", "patch_001"}, {"target", "n#1"}, {"reason", "no"}, {"current_version", 0}});
  apply_ok(graph, "patch.rejected", {{"patch_id", "patch_009"}});
  REQUIRE(graph.patch("patch_001")->status == "rejected");
  REQUIRE(graph.patch("patch_001")->rejection_reason == "no");
  REQUIRE(graph.patch("patch_009") == nullptr);
  REQUIRE(graph.apply("patch.rejected", {{"patch_id", "patch_001"}}).error().message ==
          "payload lacks \"reason\"");
}

TEST_CASE("a patch outside the update and replace vocabulary is refused", "[runtime][graph]") {
  Graph graph;
  REQUIRE(
      graph
          .apply("patch.proposed",
                 {{"patch", patch("patch_001", "n#1", "delete", json::object(), 1, "proposed")}})
          .error()
          .message ==
      "payload.patch field \"op\" is \"delete\"; the patch vocabulary is exactly update, replace");
  json old_shape = {{"id", "n#1"}, {"patch", {{"a", 1}}}};
  REQUIRE(graph.apply("patch.applied", old_shape).error().message == "payload.patch lacks \"id\"");
  REQUIRE(graph.patches().empty());
}

TEST_CASE("other event types change no state", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "chat.message", {{"id", "whatever"}});
  apply_ok(graph, "goal.created", json::object());
  REQUIRE(json(graph.to_json()) == json{{"objects", json::array()},
                                        {"relations", json::array()},
                                        {"patches", json::array()}});
}

TEST_CASE("one object counter runs across types as activegraph mints ids", "[runtime][ids]") {
  IdMint ids;
  REQUIRE(ids.next_object("task") == "task#1");
  REQUIRE(ids.next_object("task") == "task#2");
  REQUIRE(ids.next_object("note") == "note#3");
  REQUIRE(ids.next_relation() == "rel_001");
  REQUIRE(ids.next_patch() == "patch_001");
  REQUIRE(ids.next_event_number() == 1);
}

TEST_CASE("id counters are re-seeded from the history", "[runtime][ids]") {
  IdMint ids;
  ids.note("evt_041", "object.created", created("note#7", "note"));
  ids.note("evt_002", "object.created", created("imported-1", "note"));
  ids.note("evt_003", "relation.created", related("rel_012", "a", "b", "t"));
  ids.note("evt_004", "patch.applied", {{"patch", {{"id", "patch_004"}}}});
  ids.note("evt_005", "patch.rejected", {{"patch_id", "patch_009"}});
  ids.note("run_import_x", "goal.created", json::object());
  REQUIRE(ids.next_object("task") == "task#8");
  REQUIRE(ids.next_relation() == "rel_013");
  REQUIRE(ids.next_patch() == "patch_010");
  REQUIRE(ids.next_event_number() == 42);
  REQUIRE(ids.next_relation() == "rel_014");
}

TEST_CASE("an id counter at its largest value is exhausted, never wrapped", "[runtime][ids]") {
  IdMint ids;
  ids.note("evt_1", "object.created", created("note#18446744073709551614", "note"));
  REQUIRE(ids.next_object("note") == "note#18446744073709551615");
  REQUIRE(ids.next_object("note").error().message ==
          "the object id counter is exhausted (18446744073709551615 is taken); no new object id "
          "can be made");
  // A number past 2^64 - 1 is not a counter value.
  IdMint other;
  other.note("evt_1", "object.created", created("tag#99999999999999999999", "tag"));
  REQUIRE(other.next_object("tag") == "tag#1");
}
