#include "sandbox/tail.h"

#include <catch2/catch.hpp>

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
  CHECK(decode_tail("").error() == "the child wrote no tail");
  std::string bytes = encode_tail(ChildTail{});
  CHECK(decode_tail(bytes.substr(0, bytes.size() - 3)).error() ==
        "the tail is truncated (" + std::to_string(bytes.size() - 3) +
            " bytes, not a whole number of words)");
  CHECK(decode_tail(bytes + std::string(8, '\0')).error() ==
        "the tail has bytes after its message");
  auto garbage = decode_tail(std::string(16, '\xff'));
  REQUIRE_FALSE(garbage.has_value());
  CHECK(garbage.error().starts_with("the tail is not a valid message: "));
}
