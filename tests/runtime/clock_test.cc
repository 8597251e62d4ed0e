#include "runtime/clock.h"

#include <catch2/catch.hpp>

using forktrial::format_timestamp_seconds;
using forktrial::parse_timestamp;
using forktrial::runtime::TickingClock;

TEST_CASE("the ticking clock advances one millisecond per tick and writes whole seconds",
          "[runtime][clock]") {
  TickingClock clock(parse_timestamp("2024-12-31T23:59:59.998Z").value());
  REQUIRE(clock.peek() == "2024-12-31T23:59:59Z");
  REQUIRE(clock.tick() == "2024-12-31T23:59:59Z");  // .999 cut to the second
  REQUIRE(clock.now() == parse_timestamp("2024-12-31T23:59:59.999Z").value());
  REQUIRE(clock.tick() == "2025-01-01T00:00:00Z");
  REQUIRE(clock.tick() == "2025-01-01T00:00:00Z");  // several events share a second
  REQUIRE(clock.now() == parse_timestamp("2025-01-01T00:00:00.001Z").value());
}

TEST_CASE("runtime timestamps are activegraph's Clock form", "[runtime][clock]") {
  // ISO 8601 to the second with Z, as activegraph's Clock writes it.
  REQUIRE(format_timestamp_seconds(parse_timestamp("2026-05-15T10:32:01Z").value()) ==
          "2026-05-15T10:32:01Z");
  REQUIRE(format_timestamp_seconds(parse_timestamp("2026-05-15T10:32:01.999Z").value()) ==
          "2026-05-15T10:32:01Z");
  REQUIRE(format_timestamp_seconds(0) == "1970-01-01T00:00:00Z");
  REQUIRE(format_timestamp_seconds(-1) == "1969-12-31T23:59:59Z");
}
