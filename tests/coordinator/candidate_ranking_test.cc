#include "coordinator/candidate_ranking.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace forktrial::coordinator {
namespace {

using nlohmann::ordered_json;

std::vector<std::string> order(const std::vector<CandidateRank>& ranked) {
  std::vector<std::string> out;
  for (const auto& rank : ranked) out.push_back(rank.candidate);
  return out;
}

TEST_CASE("candidates rank by their share of completed trials, by name among equals",
          "[coordinator][ranking]") {
  CandidateTally tally;
  for (const char* outcome : {"completed", "crashed", "completed", "completed"}) {
    tally.add("b", outcome);
  }
  for (const char* outcome : {"completed", "queued"}) tally.add("c", outcome);
  for (const char* outcome : {"completed", "abandoned"}) tally.add("a", outcome);
  tally.add("d", "scenario_failed");
  const auto ranked = tally.ranked();
  CHECK(order(ranked) == std::vector<std::string>{"b", "a", "c", "d"});
  CHECK(ranked[0].trials == 4);
  CHECK(ranked[0].completed_share() == Approx(0.75));
  CHECK(ranked[0].outcomes ==
        std::map<std::string, std::uint64_t>{{"completed", 3}, {"crashed", 1}});
  CHECK(ranked[3].completed_share() == 0.0);
  CHECK(CandidateRank{}.completed_share() == 0.0);
}

TEST_CASE("a result line counts under its outcome once reconciled, else under its status",
          "[coordinator][ranking]") {
  CandidateTally tally;
  tally.add_result(
      ordered_json{{"candidate", "x"}, {"status", "reconciled"}, {"outcome", "crashed"}});
  tally.add_result(ordered_json{{"candidate", "x"}, {"status", "abandoned"}, {"outcome", nullptr}});
  const auto ranked = tally.ranked();
  REQUIRE(ranked.size() == 1);
  CHECK(ranked[0].outcomes ==
        std::map<std::string, std::uint64_t>{{"abandoned", 1}, {"crashed", 1}});
  CHECK(
      candidate_rank_json(ranked[0]).dump() ==
      R"({"candidate":"x","trials":2,"completed_share":0.0,"outcomes":{"abandoned":1,"crashed":1}})");
  CHECK_THROWS_AS(tally.add_result(ordered_json{{"status", "queued"}}), nlohmann::json::exception);
}

}  // namespace
}  // namespace forktrial::coordinator
