// Runs the complete example of docs/pack-authoring.md, so the page stays true.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Outcome;
using nlohmann::json;

namespace {

// Writes every fenced block preceded by "<!-- file: NAME -->" to NAME.
int write_example_files(const TempDir& dir, const std::string& markdown) {
  const std::string marker = "<!-- file: ";
  int files = 0;
  for (std::size_t at = markdown.find(marker); at != std::string::npos;
       at = markdown.find(marker, at + 1)) {
    const std::size_t name_end = markdown.find(" -->", at);
    const std::string name = markdown.substr(at + marker.size(), name_end - at - marker.size());
    const std::size_t fence = markdown.find("```", name_end);
    const std::size_t body = markdown.find('\n', fence) + 1;
    const std::size_t close = markdown.find("\n```", body);
    dir.write("pack/" + name, markdown.substr(body, close - body + 1));
    ++files;
  }
  return files;
}

std::string read_doc() {
  std::ifstream in(std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "docs" / "pack-authoring.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the pack authoring guide's example pack runs as described", "[runtime][docs]") {
  TempDir dir;
  REQUIRE(write_example_files(dir, read_doc()) == 4);
  std::vector<forktrial::store::Event> history{
      history_event(1, "bug.reported", R"({"title":"Crash on save"})"),
      history_event(2, "bug.reported",
                    R"({"title":"Slow start when the cache is cold and large"})"),
      history_event(3, "bug.reported", R"({"title":"Crash on save"})")};
  auto r = make_runtime(history);
  load_or_fail(*r, dir.path() / "pack");
  const auto result = r->rt->run_scenario("scenarios/triage.lua");
  INFO(result.message << "\n" << result.traceback);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(result.behavior_failures == 1);
  const auto& graph = r->rt->graph();
  REQUIRE(graph.objects("bug").size() == 3);
  REQUIRE(graph.object("bug#2")->data["title"] == "Slow start when the cache is cold and...");
  REQUIRE(graph.relations("duplicate_of").size() == 1);
  REQUIRE(graph.relations("duplicate_of")[0]->source == "bug#3");
  REQUIRE(graph.relations("duplicate_of")[0]->target == "bug#1");
  REQUIRE(json(graph.object("bug#1")->data) ==
          json{{"title", "Crash on save"}, {"open", false}, {"fixed_by", "abc123"}});
  const auto failed = r->of_type("behavior.failed");
  REQUIRE(failed.size() == 1);
  REQUIRE(payload_of(failed[0])["message"] == "pack.lua:40: fix.merged names no bug: bug#999");
  REQUIRE(r->of_type("bug.duplicate").size() == 1);

  REQUIRE(r->rt->run_scenario("scenarios/triage.lua::quick").outcome == Outcome::completed);
  REQUIRE(r->of_type("goal.created").size() == 1);
}
