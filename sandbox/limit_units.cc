#include "sandbox/limit_units.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "base/text.h"

namespace forktrial::sandbox {

std::expected<std::uint64_t, Status> parse_byte_size(std::string_view text) {
  const auto not_a_size = [&] {
    return failure(ErrorCode::invalid_argument,
                   quoted_excerpt(text) +
                       " is not a size; give bytes or a whole number with K, M, G or T "
                       "(binary multiples, e.g. 256M)");
  };
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return failure(ErrorCode::invalid_argument,
                   quoted_excerpt(text) + " is more bytes than 64 bits can count");
  }
  if (error != std::errc{}) return not_a_size();
  const std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  unsigned shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return not_a_size();
  }
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
    return failure(ErrorCode::invalid_argument,
                   quoted_excerpt(text) + " is more bytes than 64 bits can count");
  }
  return value << shift;
}

std::expected<double, Status> parse_duration_seconds(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  // A value too large or too small for a double is out of every range a
  // limit has: it parses as infinity or zero, for the range check to refuse.
  if (error == std::errc::result_out_of_range) {
    value = text.starts_with('-') ? -HUGE_VAL : HUGE_VAL;
  } else if (error != std::errc{}) {
    return failure(ErrorCode::invalid_argument,
                   quoted_excerpt(text) +
                       " is not a duration; give seconds, or a number with ms, s, m or h "
                       "(e.g. 10s, 500ms, 2m)");
  }
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  if (unit.empty() || unit == "s") return value;
  if (unit == "ms") return value / 1000;
  if (unit == "m") return value * 60;
  if (unit == "h") return value * 3600;
  return failure(ErrorCode::invalid_argument,
                 quoted_excerpt(text) + " has the unit " + quoted_excerpt(unit) +
                     "; give seconds, or a number with ms, s, m or h (e.g. 10s, 500ms, 2m)");
}

std::expected<std::uint64_t, Status> parse_whole_seconds(std::string_view text) {
  auto seconds = parse_duration_seconds(text);
  if (!seconds) return std::unexpected(std::move(seconds.error()));
  // 2^63 bounds the conversion; check_trial_limits refuses far less.
  if (!(*seconds >= 0) || *seconds >= 0x1p63 || std::floor(*seconds) != *seconds) {
    return failure(ErrorCode::invalid_argument,
                   quoted_excerpt(text) +
                       " is not a whole, non-negative number of seconds (the CPU net counts "
                       "whole seconds, e.g. 30s or 2m)");
  }
  return static_cast<std::uint64_t>(*seconds);
}

}  // namespace forktrial::sandbox
