#include "runtime/graph.h"

#include <catch2/catch.hpp>

using forktrial::runtime::Graph;
using nlohmann::json;

namespace {

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

TEST_CASE("object.created adds an object at version 1 in creation order", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", {{"id", "note#1"}, {"type", "note"}, {"data", {{"t", "a"}}}});
  apply_ok(graph, "object.created", {{"id", "tag#1"}, {"type", "tag"}, {"data", json::object()}});
  apply_ok(graph, "object.created", {{"id", "note#2"}, {"type", "note"}});
  REQUIRE(object_ids(graph) == std::vector<std::string>{"note#1", "tag#1", "note#2"});
  REQUIRE(object_ids(graph, "note") == std::vector<std::string>{"note#1", "note#2"});
  REQUIRE(graph.object("note#1")->version == 1);
  REQUIRE(graph.object("note#1")->data == json{{"t", "a"}});
  REQUIRE(graph.object("note#2")->data == json::object());
}

TEST_CASE("patch.applied merges shallowly and bumps the version", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created",
           {{"id", "note#1"}, {"type", "note"}, {"data", {{"a", 1}, {"b", {{"x", 1}}}}}});
  apply_ok(graph, "patch.applied", {{"id", "note#1"}, {"patch", {{"b", {{"y", 2}}}, {"c", 3}}}});
  apply_ok(graph, "patch.applied", {{"id", "note#1"}, {"patch", {{"a", 5}}}});
  const auto* note = graph.object("note#1");
  REQUIRE(note->version == 3);
  REQUIRE(note->data == json{{"a", 5}, {"b", {{"y", 2}}}, {"c", 3}});
}

TEST_CASE("object.removed cascades to the relations touching the object", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", {{"id", "a#1"}, {"type", "a"}});
  apply_ok(graph, "object.created", {{"id", "a#2"}, {"type", "a"}});
  apply_ok(graph, "object.created", {{"id", "a#3"}, {"type", "a"}});
  apply_ok(graph, "relation.created",
           {{"id", "link#1"}, {"src", "a#1"}, {"dst", "a#2"}, {"type", "link"}});
  apply_ok(graph, "relation.created",
           {{"id", "link#2"}, {"src", "a#3"}, {"dst", "a#1"}, {"type", "link"}});
  apply_ok(graph, "relation.created",
           {{"id", "link#3"}, {"src", "a#2"}, {"dst", "a#3"}, {"type", "link"}});
  apply_ok(graph, "object.removed", {{"id", "a#1"}});
  REQUIRE(graph.object("a#1") == nullptr);
  REQUIRE(graph.was_removed("a#1"));
  REQUIRE(graph.relation("link#1") == nullptr);
  REQUIRE(graph.relation("link#2") == nullptr);
  REQUIRE(graph.relations().size() == 1);
  REQUIRE(graph.relations()[0]->id == "link#3");

  auto dangling = graph.apply("relation.created",
                              {{"id", "link#4"}, {"src", "a#2"}, {"dst", "a#1"}, {"type", "link"}});
  REQUIRE_FALSE(dangling);
  REQUIRE(dangling.error() == "relation \"link#4\" refers to removed object \"a#1\"");
}

TEST_CASE("relation.removed removes one relation", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", {{"id", "a#1"}, {"type", "a"}});
  apply_ok(graph, "relation.created",
           {{"id", "self#1"}, {"src", "a#1"}, {"dst", "a#1"}, {"type", "self"}});
  apply_ok(graph, "relation.removed", {{"id", "self#1"}});
  REQUIRE(graph.relations().empty());
  REQUIRE(graph.object("a#1") != nullptr);
  auto again = graph.apply("relation.removed", {{"id", "self#1"}});
  REQUIRE(again.error() == "relation.removed names removed relation \"self#1\"");
}

TEST_CASE("inconsistent events are refused and change nothing", "[runtime][graph]") {
  Graph graph;
  REQUIRE(graph.apply("object.removed", {{"id", "x#1"}}).error() ==
          "object.removed names unknown object \"x#1\"");
  REQUIRE(graph.apply("patch.applied", {{"id", "x#1"}, {"patch", json::object()}}).error() ==
          "patch.applied names unknown object \"x#1\"");
  REQUIRE(graph.apply("object.created", {{"type", "x"}}).error() == "payload lacks \"id\"");
  REQUIRE(graph.apply("object.created", {{"id", "x#1"}, {"type", "x"}, {"data", 3}}).error() ==
          "payload field \"data\" must be a JSON object, got 3");
  apply_ok(graph, "object.created", {{"id", "x#1"}, {"type", "x"}});
  apply_ok(graph, "object.removed", {{"id", "x#1"}});
  REQUIRE(graph.apply("object.created", {{"id", "x#1"}, {"type", "x"}}).error() ==
          "id \"x#1\" is already used in this run");
  REQUIRE(graph.objects().empty());
}

TEST_CASE("other event types change no state", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "chat.message", {{"id", "whatever"}});
  apply_ok(graph, "goal.created", json::object());
  REQUIRE(graph.objects().empty());
  REQUIRE(graph.next_id("note") == "note#1");
}

TEST_CASE("id counters continue after an inherited history", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", {{"id", "note#7"}, {"type", "note"}});
  apply_ok(graph, "object.created", {{"id", "note#3"}, {"type", "note"}});
  apply_ok(graph, "object.created", {{"id", "imported-1"}, {"type", "note"}});
  apply_ok(graph, "relation.created",
           {{"id", "link#2"}, {"src", "note#7"}, {"dst", "note#3"}, {"type", "link"}});
  apply_ok(graph, "object.removed", {{"id", "note#7"}});
  REQUIRE(graph.next_id("note") == "note#8");
  REQUIRE(graph.next_id("link") == "link#3");
  REQUIRE(graph.next_id("tag") == "tag#1");
}

TEST_CASE("an id counter at its largest value is exhausted, never wrapped", "[runtime][graph]") {
  Graph graph;
  apply_ok(graph, "object.created", {{"id", "note#18446744073709551614"}, {"type", "note"}});
  REQUIRE(graph.next_id("note") == "note#18446744073709551615");
  apply_ok(graph, "object.created", {{"id", "note#18446744073709551615"}, {"type", "note"}});
  REQUIRE(graph.next_id("note").error() ==
          "the id counter of type \"note\" is exhausted (note#18446744073709551615 is taken); no "
          "new id of that type can be made");
  // A number past 2^64 - 1 is not a counter value; it cannot collide.
  apply_ok(graph, "object.created", {{"id", "tag#99999999999999999999"}, {"type", "tag"}});
  REQUIRE(graph.next_id("tag") == "tag#1");
}
