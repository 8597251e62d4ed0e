// Human units for trial limits: "256M" of memory, "500ms" of wall clock. The
// command line (`forktrial trial --max-rss 256M`) and batch files
// (`max_rss = "256M"`) read limits through these, so both accept the same
// spellings.
//
// These parse only: a value that parses may still be out of the range a
// trial can run with ("-1s", "1e300", "16T"), which check_trial_limits
// (sandbox/trial_types.h) refuses, naming the field. That keeps one rule per
// range, whichever way the value was written.
//
// Pure functions, thread-safe. Errors are a phrase without the field name
// ("\"lots\" is not a size; give bytes or a number with K, M, G or T (e.g.
// 256M)"); the caller prefixes the option or key it read.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "base/error.h"

namespace forktrial::sandbox {

// Bytes: a non-negative integer, optionally followed by a binary multiple,
// K or KiB (2^10), M or MiB (2^20), G or GiB (2^30), T or TiB (2^40):
// "268435456", "512K", "256M", "1G". No sign, space or fraction; a value
// that overflows 64 bits is an error.
std::expected<std::uint64_t, Status> parse_byte_size(std::string_view text);

// Seconds: a number, optionally followed by a unit, ms, s, m (minutes) or h:
// "10", "1.5", "10s", "500ms", "2m", "1h". The number is read as a C++
// double (so "-1", "inf" and "1e-9" parse, for the range check to refuse).
std::expected<double, Status> parse_duration_seconds(std::string_view text);

// Whole seconds, for the CPU net: a duration as above that is a whole,
// non-negative number of seconds ("30", "30s", "2m"; not "500ms").
std::expected<std::uint64_t, Status> parse_whole_seconds(std::string_view text);

}  // namespace forktrial::sandbox
