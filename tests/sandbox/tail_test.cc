#include "sandbox/tail.h"

#include <catch2/catch.hpp>

#include "sandbox/spawn.h"

using namespace forktrial;
using namespace forktrial::sandbox;

TEST_CASE("a tail round-trips through its Cap'n Proto encoding", "[sandbox][tail]") {
  ChildTail tail;
  tail.outcome = Outcome::limits_exceeded;
  tail.net = Net::event_budget;
  tail.events_appended = 42;
  tail.behavior_failures = 3;
  tail.last_seq = 99;
  tail.detail = "event budget of 40 exhausted";
  tail.warnings = {"memory net degraded: ..."};
  auto decoded = decode_tail(encode_tail(tail));
  REQUIRE(decoded.has_value());
  CHECK(*decoded == tail);
}

TEST_CASE("a missing, truncated or trailing-garbage tail is refused", "[sandbox][tail]") {
  CHECK(decode_tail("").error().message == "the child wrote no tail");
  std::string bytes = encode_tail(ChildTail{});
  CHECK(decode_tail(bytes.substr(0, bytes.size() - 3)).error().message ==
        "the tail is truncated (" + std::to_string(bytes.size() - 3) +
            " bytes, not a whole number of words)");
  CHECK(decode_tail(bytes + std::string(8, '\0')).error().message ==
        "the tail has bytes after its message");
  auto garbage = decode_tail(std::string(16, '\xff'));
  REQUIRE_FALSE(garbage.has_value());
  CHECK(garbage.error().message.starts_with("the tail is not a valid message: "));
}

TEST_CASE("a tail with oversized text still fits the parent's cap and says it was cut",
          "[sandbox][tail]") {
  const std::size_t parent_cap = SpawnRequest{}.tail_cap;
  ChildTail tail;
  tail.outcome = Outcome::scenario_failed;
  tail.detail = "scenario.lua:1: " + std::string(16 << 20, 'x');
  for (int i = 0; i < 200; ++i) tail.warnings.push_back(std::string(64 << 10, 'w'));
  const std::string bytes = encode_tail(tail);
  CHECK(bytes.size() <= parent_cap);
  auto decoded = decode_tail(bytes);
  REQUIRE(decoded.has_value());
  CHECK(decoded->outcome == Outcome::scenario_failed);
  CHECK(decoded->detail.starts_with("scenario.lua:1: xxx"));
  CHECK(decoded->detail.ends_with(" bytes cut]"));
  CHECK(decoded->detail.size() <= 256 * 1024);
  REQUIRE_FALSE(decoded->warnings.empty());
  CHECK(decoded->warnings.size() <= 33);
  CHECK(decoded->warnings.front().ends_with(" bytes cut]"));
  CHECK(decoded->warnings.front().size() <= 4 * 1024);
  CHECK(decoded->warnings.back().find("warnings cut") != std::string::npos);
}

TEST_CASE("tail text that is not valid UTF-8 arrives with U+FFFD", "[sandbox][tail]") {
  ChildTail tail;
  tail.outcome = Outcome::scenario_failed;
  tail.detail = "bad \xff byte";
  tail.warnings = {"net \xc3"};
  auto decoded = decode_tail(encode_tail(tail));
  REQUIRE(decoded.has_value());
  CHECK(decoded->detail == "bad \xEF\xBF\xBD byte");
  CHECK(decoded->warnings == std::vector<std::string>{"net \xEF\xBF\xBD"});
}
