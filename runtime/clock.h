// The runtime's clock: timestamps come from the log, never from the wall
// clock, so a trial is a deterministic function of its inputs.
//
// A `TickingClock` starts at the fork tip's timestamp (the Unix epoch for an
// empty history) and advances exactly one millisecond per event it stamps;
// the first stamped event is therefore one millisecond after the tip. Values
// are kept at millisecond precision: a finer fraction in the tip is truncated.
//
// Thread-compatible: a clock belongs to one runtime.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace forktrial::runtime {

// Milliseconds since 1970-01-01T00:00:00Z.
using UnixMillis = std::int64_t;

// Parses an ISO-8601 UTC timestamp "YYYY-MM-DDTHH:MM:SS", an optional
// fraction of any length after '.', then "Z" or "+00:00". Errors name the
// text and what is wrong with it.
std::expected<UnixMillis, std::string> parse_timestamp(std::string_view text);

// "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string format_timestamp(UnixMillis millis);

class TickingClock {
 public:
  explicit TickingClock(UnixMillis start) : now_(start) {}
  // Advances by one millisecond and returns the new time, formatted.
  std::string tick() { return format_timestamp(++now_); }
  UnixMillis now() const { return now_; }

 private:
  UnixMillis now_;
};

}  // namespace forktrial::runtime
