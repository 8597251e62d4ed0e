#include "runtime/clock.h"

#include <catch2/catch.hpp>

using forktrial::runtime::format_timestamp;
using forktrial::runtime::parse_timestamp;
using forktrial::runtime::TickingClock;

TEST_CASE("timestamps parse with Z, +00:00 and fractions of any length", "[runtime][clock]") {
  REQUIRE(parse_timestamp("1970-01-01T00:00:00Z").value() == 0);
  REQUIRE(parse_timestamp("1970-01-01T00:00:01+00:00").value() == 1000);
  REQUIRE(parse_timestamp("2024-05-01T12:00:00.5Z").value() == 1714564800500);
  REQUIRE(parse_timestamp("2024-05-01T12:00:00.123456Z").value() == 1714564800123);
  REQUIRE(parse_timestamp("2024-02-29T23:59:59.999+00:00").value() == 1709251199999);
}

TEST_CASE("malformed timestamps are refused with the reason", "[runtime][clock]") {
  auto no_zone = parse_timestamp("2024-05-01T12:00:00");
  REQUIRE_FALSE(no_zone);
  REQUIRE(no_zone.error().find("does not end in \"Z\" or \"+00:00\"") != std::string::npos);
  auto other_zone = parse_timestamp("2024-05-01T12:00:00+02:00");
  REQUIRE_FALSE(other_zone);
  auto bad_date = parse_timestamp("2023-02-29T00:00:00Z");
  REQUIRE_FALSE(bad_date);
  REQUIRE(bad_date.error().find("date that does not exist") != std::string::npos);
  REQUIRE_FALSE(parse_timestamp("2024-05-01 12:00:00Z"));
  REQUIRE_FALSE(parse_timestamp("2024-05-01T25:00:00Z"));
  REQUIRE_FALSE(parse_timestamp("2024-05-01T12:00:00.Z"));
  REQUIRE_FALSE(parse_timestamp(""));
}

TEST_CASE("timestamps format as milliseconds in UTC", "[runtime][clock]") {
  REQUIRE(format_timestamp(0) == "1970-01-01T00:00:00.000Z");
  REQUIRE(format_timestamp(1714564800123) == "2024-05-01T12:00:00.123Z");
  REQUIRE(format_timestamp(1709251199999) == "2024-02-29T23:59:59.999Z");
}

TEST_CASE("the ticking clock advances one millisecond per tick", "[runtime][clock]") {
  TickingClock clock(parse_timestamp("2024-12-31T23:59:59.998Z").value());
  REQUIRE(clock.tick() == "2024-12-31T23:59:59.999Z");
  REQUIRE(clock.tick() == "2025-01-01T00:00:00.000Z");
}
