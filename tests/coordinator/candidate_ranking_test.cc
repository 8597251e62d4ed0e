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

TEST_CASE("candidates rank by the share of their finished trials that completed",
          "[coordinator][ranking]") {
  CandidateTally tally;
  for (const char* outcome : {"completed", "crashed", "completed", "completed"}) {
    tally.add("b", outcome);
  }
  for (const char* outcome : {"completed", "queued"}) tally.add("c", outcome);
  for (const char* outcome : {"completed", "abandoned"}) tally.add("a", outcome);
  tally.add("d", "scenario_failed");
  const auto ranked = tally.ranked();
  CHECK(order(ranked) == std::vector<std::string>{"c", "b", "a", "d"});
  CHECK(ranked[0].trials == 2);
  CHECK(ranked[0].finished() == 1);
  CHECK(ranked[0].completed_share() == 1.0);
  CHECK(ranked[1].trials == 4);
  CHECK(ranked[1].finished() == 4);
  CHECK(ranked[1].completed_share() == Approx(0.75));
  CHECK(ranked[1].outcomes ==
        std::map<std::string, std::uint64_t>{{"completed", 3}, {"crashed", 1}});
  CHECK(ranked[2].completed_share() == Approx(0.5));
  CHECK(ranked[3].completed_share() == 0.0);
  CHECK(CandidateRank{}.completed_share() == 0.0);
  CHECK(CandidateRank{}.finished() == 0);
}

TEST_CASE("a candidate with many trials still queued is not ranked below a worse one further along",
          "[coordinator][ranking]") {
  CandidateTally tally;
  // "fast" is further along but fails half its trials; "slow" has completed
  // every trial that finished.
  for (int i = 0; i < 4; ++i) tally.add("fast", "completed");
  for (int i = 0; i < 4; ++i) tally.add("fast", "crashed");
  tally.add("slow", "completed");
  for (int i = 0; i < 9; ++i) tally.add("slow", "queued");
  const auto ranked = tally.ranked();
  CHECK(order(ranked) == std::vector<std::string>{"slow", "fast"});
  CHECK(ranked[0].completed_share() == 1.0);
  CHECK(ranked[0].finished() == 1);
  CHECK(ranked[0].trials == 10);
  CHECK(ranked[1].completed_share() == Approx(0.5));
  CHECK(ranked[1].finished() == 8);
}

TEST_CASE("queued, leased, reported and cancelled trials have no verdict, abandoned ones do",
          "[coordinator][ranking]") {
  CandidateTally tally;
  for (const char* status : {"queued", "leased", "reported", "cancelled"}) tally.add("x", status);
  tally.add("x", "completed");
  tally.add("x", "abandoned");
  const auto ranked = tally.ranked();
  REQUIRE(ranked.size() == 1);
  CHECK(ranked[0].trials == 6);
  CHECK(ranked[0].finished() == 2);
  CHECK(ranked[0].completed_share() == Approx(0.5));
}

TEST_CASE("among equal shares more finished trials rank first, then names",
          "[coordinator][ranking]") {
  CandidateTally tally;
  tally.add("a", "completed");
  tally.add("a", "queued");
  for (int i = 0; i < 3; ++i) tally.add("b", "completed");
  tally.add("c", "completed");
  tally.add("d", "queued");  // nothing finished: a share of 0, last
  tally.add("e", "crashed");
  const auto ranked = tally.ranked();
  CHECK(order(ranked) == std::vector<std::string>{"b", "a", "c", "e", "d"});
  CHECK(ranked[4].finished() == 0);
  CHECK(ranked[4].completed_share() == 0.0);
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
      R"({"candidate":"x","trials":2,"finished":2,"completed_share":0.0,"outcomes":{"abandoned":1,"crashed":1}})");
  CHECK_THROWS_AS(tally.add_result(ordered_json{{"status", "queued"}}), nlohmann::json::exception);
}

}  // namespace
}  // namespace forktrial::coordinator
