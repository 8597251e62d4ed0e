// The scratch SQLite store of a trial run by activegraph's own trial child
// (`python3 -m activegraph.sandbox._child`, docs/trials.md): written before
// the child starts, in activegraph's layout, holding the fork and its
// inherited history; read back after the child exits, for the rows the child
// appended. What is read back becomes the trial's delta through the same
// rules as a Lua trial's (sandbox/delta.h): the store wins.
//
// The child is an adversary: it may rewrite, drop or add any row, table or
// view of the file. Reading back therefore trusts nothing in it but the
// rows of the `events` table past the inherited history, read with SQLite's
// defensive settings, bounded in rows, bytes and work.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "store/event.h"

namespace forktrial::import {

// The fork's row in the scratch store's `runs` table.
struct ScratchFork {
  store::RunId fork;                                   // the child's fork_run_id
  store::RunId parent;                                 // runs.parent_run_id
  store::EventId at;                                   // runs.forked_at_event_id
  std::string label;                                   // runs.label
  std::string created_at;                              // runs.created_at
  std::optional<std::string> goal = std::nullopt;      // inherited from the parent
  std::optional<std::string> frame_id = std::nullopt;  // inherited from the parent
};

// Calls its argument with each event of the inherited history, oldest first,
// until it returns false or the history ends.
using HistorySource = std::function<void(const std::function<bool(const store::EventView&)>&)>;

// Writes a new SQLite file at `file` (refused with conflict if it exists)
// with activegraph's tables and indexes, meta.schema_version "1", the fork's
// run row, and the history as the fork's rows: seq 1..n, every text field
// and the payload exactly the bytes stored. One transaction; the file is
// left in rollback-journal mode, closed. Returns n, the child's
// `initial_events`.
std::expected<std::uint64_t, Status> write_scratch_store(const std::filesystem::path& file,
                                                         const ScratchFork& fork,
                                                         const HistorySource& history);

// How much of what a child appended is read back at most.
struct ScratchLimits {
  std::uint64_t max_events = 100'000;
  std::uint64_t max_bytes = std::uint64_t{64} << 20;  // of all text fields together
};

// What the child appended: the fork's rows past the inherited history.
struct ScratchAppended {
  std::vector<store::NewEvent> events;  // in seq order, bytes as stored
  // More rows, or more bytes, than the limits let through were there (or
  // one value longer than limits.max_bytes, which is never read): `events`
  // holds the first ones, and the delta goes past the write budget.
  bool cut = false;
};

// Reads back the rows of `fork` in `events` whose seq is past
// `initial_events` (rows the child rewrote or dropped in the history are
// ignored: the authoritative history is the store's). Refused
// (invalid_argument) when the file is not a regular file (a FIFO would block
// the read), not an SQLite database, when `events`
// is not a table with activegraph's columns, or when a row has a column
// that is not text where activegraph writes text (NULL only where it allows
// NULL); each message names the row. Text rules, payload rules and
// continuity are the delta's rules, not checked here.
std::expected<ScratchAppended, Status> read_scratch_appended(const std::filesystem::path& file,
                                                             const store::RunId& fork,
                                                             std::uint64_t initial_events,
                                                             const ScratchLimits& limits = {});

}  // namespace forktrial::import
