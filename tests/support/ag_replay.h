// Test support: the independent re-implementation of activegraph's projector
// (tests/runtime/ag_replayer.py) run on a history, and forktrial's projected
// state compared with what it projects.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/temp_dir.h"

namespace forktrial::testing {

// The state ag_replayer.py projects from `jsonl` (events, one JSON object per
// line, with at least "type" and "payload"): {"objects", "relations",
// "patches"}. Fails the test if the replayer refuses the history, as
// activegraph's projector would.
nlohmann::ordered_json ag_replayed(const TempDir& dir, const std::string& jsonl);

// Requires `ours` and `theirs` to hold the same items in the same order, each
// item's keys in the same order; a difference names the item.
void require_same_state(const nlohmann::ordered_json& ours, const nlohmann::ordered_json& theirs);

}  // namespace forktrial::testing
