// The runtime's clock: timestamps come from the log, never from the wall
// clock, so a trial is a deterministic function of its inputs.
//
// A `TickingClock` starts at the fork tip's timestamp (the Unix epoch for an
// empty history) and advances exactly one millisecond per event it stamps;
// the first stamped event is therefore one millisecond after the tip. Values
// are kept at millisecond precision (a finer fraction in the tip is
// truncated), so the clock never goes backwards; only the text it writes is
// cut to the second, as activegraph's Clock writes it.
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
  // Advances by one millisecond and returns the new time as activegraph's
  // Clock writes it: to the second ("2026-05-15T10:32:01Z"), so several
  // events may share a second.
  std::string tick() { return format_timestamp_seconds(++now_); }
  // The text tick() returns next, without advancing.
  std::string peek() const { return format_timestamp_seconds(now_ + 1); }
  UnixMillis now() const { return now_; }

 private:
  UnixMillis now_;
};

}  // namespace forktrial::runtime
