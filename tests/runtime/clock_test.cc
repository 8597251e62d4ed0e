#include "runtime/clock.h"

#include <catch2/catch.hpp>

using forktrial::parse_timestamp;
using forktrial::runtime::TickingClock;

TEST_CASE("the ticking clock advances one millisecond per tick", "[runtime][clock]") {
  TickingClock clock(parse_timestamp("2024-12-31T23:59:59.998Z").value());
  REQUIRE(clock.tick() == "2024-12-31T23:59:59.999Z");
  REQUIRE(clock.tick() == "2025-01-01T00:00:00.000Z");
}
