// Import of an activegraph SQLite store (docs/store-format.md, "activegraph
// SQLite", lists the tables and columns accepted).
//
// Every run of the file is imported with its id, label, creation time,
// events (in `seq` order) and lineage, all in one store transaction: a
// problem anywhere in the file imports nothing. Thread-safe as EventStore is;
// the SQLite file is opened read-only for the duration of the call.
#pragma once

#include <filesystem>
#include <vector>

#include "store/event_store.h"

namespace forktrial::import {

// Refused with invalid_input (unreadable file, missing table or column, bad
// payload or timestamp, text breaking the store's text rule (store/event.h)
// in a run's id, label or created_at or an event's text fields, unknown
// parent or fork event, cyclic lineage; each message names the run, event and
// column involved), or with run_exists if a
// run id of the file is already in the store. Returns the imported runs,
// parents before their forks.
store::Result<std::vector<store::RunInfo>> import_activegraph_sqlite(
    store::EventStore& store, const std::filesystem::path& file);

}  // namespace forktrial::import
