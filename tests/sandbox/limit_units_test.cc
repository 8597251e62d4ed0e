#include "sandbox/limit_units.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace forktrial::sandbox;

TEST_CASE("sizes are bytes or binary multiples", "[sandbox][units]") {
  CHECK(parse_byte_size("268435456") == 268435456u);
  CHECK(parse_byte_size("0") == 0u);
  CHECK(parse_byte_size("512K") == 512u << 10);
  CHECK(parse_byte_size("256M") == 256u << 20);
  CHECK(parse_byte_size("256MiB") == 256u << 20);
  CHECK(parse_byte_size("1G") == std::uint64_t{1} << 30);
  CHECK(parse_byte_size("1T") == std::uint64_t{1} << 40);
}

TEST_CASE("a size that is not one says what is", "[sandbox][units]") {
  for (const char* text : {"", "lots", "-1", "256MB", "1.5G", " 1G", "1G ", "+1"}) {
    INFO(text);
    CHECK(parse_byte_size(text).error().message ==
          "\"" + std::string(text) +
              "\" is not a size; give bytes or a whole number with K, M, G or T (binary "
              "multiples, e.g. 256M)");
  }
  CHECK(parse_byte_size("16777216T").error().message ==
        "\"16777216T\" is more bytes than 64 bits can count");
  CHECK(parse_byte_size("99999999999999999999").error().message ==
        "\"99999999999999999999\" is more bytes than 64 bits can count");
  CHECK(parse_byte_size("\x1b[2J").error().message.starts_with("\"\\x1b[2J\" is not a size"));
}

TEST_CASE("durations are seconds or a number with a unit", "[sandbox][units]") {
  CHECK(parse_duration_seconds("10") == 10.0);
  CHECK(parse_duration_seconds("1.5") == 1.5);
  CHECK(parse_duration_seconds("10s") == 10.0);
  CHECK(parse_duration_seconds("500ms") == 0.5);
  CHECK(parse_duration_seconds("2m") == 120.0);
  CHECK(parse_duration_seconds("1h") == 3600.0);
  // Parsed, for check_trial_limits to refuse with the field's range.
  CHECK(parse_duration_seconds("-1") == -1.0);
  CHECK(std::isinf(*parse_duration_seconds("inf")));
  CHECK(std::isinf(*parse_duration_seconds("1e999")));
  CHECK(parse_duration_seconds("soon").error().message ==
        "\"soon\" is not a duration; give seconds, or a number with ms, s, m or h (e.g. 10s, "
        "500ms, 2m)");
  CHECK(parse_duration_seconds("3d").error().message ==
        "\"3d\" has the unit \"d\"; give seconds, or a number with ms, s, m or h (e.g. 10s, "
        "500ms, 2m)");
}

TEST_CASE("the CPU net takes whole seconds", "[sandbox][units]") {
  CHECK(parse_whole_seconds("30") == 30u);
  CHECK(parse_whole_seconds("30s") == 30u);
  CHECK(parse_whole_seconds("2m") == 120u);
  CHECK(parse_whole_seconds("2000ms") == 2u);
  for (const char* text : {"500ms", "1.5", "-1", "inf", "nan"}) {
    INFO(text);
    CHECK(parse_whole_seconds(text).error().message ==
          "\"" + std::string(text) +
              "\" is not a whole, non-negative number of seconds (the CPU net counts whole "
              "seconds, e.g. 30s or 2m)");
  }
}
