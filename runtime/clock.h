// The runtime's clock: timestamps come from the log, never from the wall
// clock, so a trial is a deterministic function of its inputs.
//
// A `TickingClock` starts at the fork tip's timestamp (the Unix epoch for an
// empty history) and advances exactly one millisecond per event it stamps;
// the first stamped event is therefore one millisecond after the tip. Values
// are kept at millisecond precision: a finer fraction in the tip is truncated.
// Parsing and formatting are base/timestamp.h's, the rule the importers use.
//
// Thread-compatible: a clock belongs to one runtime.
#pragma once

#include <string>

#include "base/timestamp.h"

namespace forktrial::runtime {

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
