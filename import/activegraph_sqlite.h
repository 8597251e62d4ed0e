// Import of an activegraph SQLite store (docs/store-format.md, "activegraph
// SQLite", lists the tables and columns accepted).
//
// Every run of the file is imported with its id, label, creation time, goal,
// frame id, events (in `seq` order, payloads in their stored bytes) and
// lineage, all in one store transaction: a problem anywhere in the file
// imports nothing. Thread-safe as EventStore is; the SQLite file is opened
// read-only for the duration of the call and read in one read transaction,
// so a store another process appends to (activegraph's WAL mode) imports one
// committed state.
#pragma once

#include <filesystem>
#include <vector>

#include "store/event_store.h"

namespace forktrial::import {

// Refused with invalid_input (unreadable file, a meta.schema_version other
// than "1" (naming both), missing table or column, a compacted run (naming
// the run and its runtime.snapshot event), a bad payload (not one JSON
// object, or holding NaN or Infinity) or timestamp, text breaking the store's text rule
// (store/event.h) in a run's id, label or created_at or an event's text fields, unknown parent or
// fork event, cyclic lineage; each message names the run, event and column involved), or with
// run_exists if a run id of the file is already in the store. Returns the imported runs, parents
// before their forks.
store::Result<std::vector<store::RunInfo>> import_activegraph_sqlite(
    store::EventStore& store, const std::filesystem::path& file);

}  // namespace forktrial::import
