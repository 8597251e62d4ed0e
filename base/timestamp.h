// Timestamps: the one parser and the one formatter of forktrial's time text.
//
// Every timestamp forktrial reads (an imported event, a fork's tip, a
// recorded run) is ISO-8601 UTC: "YYYY-MM-DDTHH:MM:SS", an optional fraction
// of any length after '.', then "Z" or "+00:00" — with an uppercase 'T' and
// 'Z', a date that exists and a time of day in range. The runtime's events
// carry "YYYY-MM-DDTHH:MM:SSZ", as activegraph's Clock writes them; everything
// else forktrial writes (the parent's records, a run's created_at) is
// "YYYY-MM-DDTHH:MM:SS.mmmZ". Import and runtime use this same rule, so a
// recorded run that imports is a run every trial can read.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "base/error.h"

namespace forktrial {

// Milliseconds since 1970-01-01T00:00:00Z.
using UnixMillis = std::int64_t;

// Parses `text` by the rule above; a finer fraction than milliseconds is
// truncated. The error names the text and what is wrong with it, ending with
// the expected form.
std::expected<UnixMillis, Status> parse_timestamp(std::string_view text);

// "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string format_timestamp(UnixMillis millis);

// "YYYY-MM-DDTHH:MM:SSZ", the fraction dropped (rounded down): the form
// activegraph's Clock writes (ISO 8601, second precision, "Z"). The runtime
// writes its events' timestamps this way.
std::string format_timestamp_seconds(UnixMillis millis);

// The system clock, now, formatted.
std::string now_timestamp();

}  // namespace forktrial
