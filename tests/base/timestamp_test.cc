// The one timestamp rule: what imports accept is what the runtime can read.
#include "base/timestamp.h"

#include <catch2/catch.hpp>

using forktrial::format_timestamp;
using forktrial::parse_timestamp;

TEST_CASE("timestamps parse with Z, +00:00 and fractions of any length", "[base][timestamp]") {
  REQUIRE(parse_timestamp("1970-01-01T00:00:00Z").value() == 0);
  REQUIRE(parse_timestamp("1970-01-01T00:00:01+00:00").value() == 1000);
  REQUIRE(parse_timestamp("2024-05-01T12:00:00.5Z").value() == 1714564800500);
  REQUIRE(parse_timestamp("2024-05-01T12:00:00.123456Z").value() == 1714564800123);
  REQUIRE(parse_timestamp("2024-02-29T23:59:59.999+00:00").value() == 1709251199999);
}

TEST_CASE("malformed timestamps are refused with the reason", "[base][timestamp]") {
  auto no_zone = parse_timestamp("2024-05-01T12:00:00");
  REQUIRE_FALSE(no_zone);
  REQUIRE(no_zone.error().message.find("does not end in \"Z\" or \"+00:00\"") != std::string::npos);
  auto other_zone = parse_timestamp("2024-05-01T12:00:00+02:00");
  REQUIRE_FALSE(other_zone);
  auto bad_date = parse_timestamp("2023-02-29T00:00:00Z");
  REQUIRE_FALSE(bad_date);
  REQUIRE(bad_date.error().message.find("date that does not exist") != std::string::npos);
  REQUIRE_FALSE(parse_timestamp("2024-05-01 12:00:00Z"));
  REQUIRE_FALSE(parse_timestamp("2024-05-01T25:00:00Z"));
  REQUIRE_FALSE(parse_timestamp("2024-05-01T12:00:00.Z"));
  REQUIRE_FALSE(parse_timestamp(""));
}

TEST_CASE("timestamps format as milliseconds in UTC", "[base][timestamp]") {
  REQUIRE(format_timestamp(0) == "1970-01-01T00:00:00.000Z");
  REQUIRE(format_timestamp(1714564800123) == "2024-05-01T12:00:00.123Z");
  REQUIRE(format_timestamp(1709251199999) == "2024-02-29T23:59:59.999Z");
}

TEST_CASE("lower-case separators and impossible dates are refused, as the runtime refuses them",
          "[base][timestamp]") {
  auto lower_z = parse_timestamp("2026-01-30T10:00:00z");
  REQUIRE_FALSE(lower_z);
  CHECK(lower_z.error().message ==
        "timestamp \"2026-01-30T10:00:00z\" does not end in \"Z\" or \"+00:00\" (only UTC is "
        "accepted); expected ISO-8601 UTC such as 2024-05-01T12:00:00.000Z");
  CHECK_FALSE(parse_timestamp("2026-01-30t10:00:00Z"));
  auto february_30 = parse_timestamp("2026-02-30T10:00:00Z");
  REQUIRE_FALSE(february_30);
  CHECK(february_30.error().message ==
        "timestamp \"2026-02-30T10:00:00Z\" names a date that does not exist; expected ISO-8601 "
        "UTC such as 2024-05-01T12:00:00.000Z");
  CHECK_FALSE(parse_timestamp("2026-02-30T10:00:00z"));
  CHECK_FALSE(parse_timestamp("2026-01-30T10:00:60Z"));
}

TEST_CASE("a hostile timestamp is quoted escaped and shortened in the error", "[base][timestamp]") {
  auto hostile = parse_timestamp("\x1b[2J" + std::string(100, 'x'));
  REQUIRE_FALSE(hostile);
  CHECK(hostile.error().message.starts_with("timestamp \"\\x1b[2J"));
  CHECK(hostile.error().message.find('\x1b') == std::string::npos);
  CHECK(hostile.error().message.size() < 200);
}

TEST_CASE("the system clock formats as forktrial writes every time", "[base][timestamp]") {
  const std::string now = forktrial::now_timestamp();
  REQUIRE(now.size() == 24);
  CHECK(now.ends_with("Z"));
  CHECK(now[19] == '.');
  CHECK(format_timestamp(parse_timestamp(now).value()) == now);
}
