// activegraph's JSON Lines event format: one JSON object per line with the
// fields id, type, payload (an object), actor, frame_id, caused_by (string or
// null; an absent field reads as null) and timestamp (ISO-8601 UTC). Other
// fields (such as a "seq" written by another tool) are ignored on input.
//
// Stateless functions; safe to call from any thread.
#pragma once

#include <expected>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/event.h"

namespace forktrial::import::jsonl {

// A problem with one line of input; `message` starts with "line N: ".
struct LineError {
  std::size_t line = 0;
  std::string message;
};

// Parses a whole JSON Lines stream. Lines holding only whitespace are
// skipped. Each payload is kept as the exact bytes it has on its line
// (checked by import/json_text.h, never re-serialized). The first malformed
// line (bad JSON, a payload holding NaN or Infinity, a missing or mistyped
// field,
// a text field breaking the store's text rule (store/event.h: empty id or
// type, control characters, too long), a timestamp that is not ISO-8601 UTC,
// an id repeated from an earlier line) fails the whole parse.
std::expected<std::vector<store::NewEvent>, LineError> parse_events(std::istream& in);

// One event as a JSON Lines line (no trailing newline), byte for byte what
// activegraph's `export-trace --format jsonl` writes: Python's json.dumps of
// {id, type, payload, actor, frame_id, caused_by, timestamp} with its default
// arguments (", " and ": " separators, non-ASCII escaped as \uXXXX), the
// payload re-emitted token by token from its stored bytes
// (import/json_text.h). Throws store::StoreError when the stored payload is
// not valid JSON; a text field that is not valid UTF-8 (only a store older
// than the text rule can hold one) is written with U+FFFD.
std::string to_line(const store::EventView& event);

}  // namespace forktrial::import::jsonl
