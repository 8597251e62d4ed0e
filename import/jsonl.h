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
#include "store/event_store.h"

namespace forktrial::import::jsonl {

// A problem with one line of input: invalid_argument, its message starting
// with "line N: " (line 0 and internal: reading the input failed).
struct LineError : Status {
  std::size_t line = 0;

  LineError(std::size_t at, std::string why)
      : Status{at == 0 ? ErrorCode::internal : ErrorCode::invalid_argument, std::move(why)},
        line(at) {}
};

// Parses a whole JSON Lines stream. Lines holding only whitespace are
// skipped. Each payload is kept as the exact bytes it has on its line
// (checked by store/json_text.h, never re-serialized). The first malformed
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
// (store/json_text.h). Throws store::StoreError when the stored payload is
// not valid JSON; a text field that is not valid UTF-8 (only a store older
// than the text rule can hold one) is written with U+FFFD.
std::string to_line(const store::EventView& event);

// Imports `events` as a new fork of `parent` at event `at`, in one
// transaction. activegraph copies a fork's inherited prefix into the fork's
// own rows, so the export of a fork starts with its parent's history up to
// the fork point: when the first event has the id of the parent's first
// event, the file must repeat that whole prefix (compared as exported lines,
// so a payload's spelling may differ but not its value) and the copy is
// dropped; otherwise `events` are the fork's own events. Refused, with
// nothing written, when the parent or `at` is unknown or the repeated prefix
// differs (the message names the first differing event).
store::Result<store::RunInfo> import_fork(store::EventStore& store, const store::RunId& parent,
                                          const store::EventId& at, const store::NewRun& fork,
                                          std::vector<store::NewEvent> events);

}  // namespace forktrial::import::jsonl
