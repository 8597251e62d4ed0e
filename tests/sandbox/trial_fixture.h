// Test support for trials: a recorded parent run in a fresh store (packs are
// written with tests/support/pack_writer.h).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sandbox/trial.h"
#include "store/event_store.h"
#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

namespace forktrial::testing {

// A store in `dir`/store with one recorded run "run_rec": goal.created,
// then three chat.message events ("hello", "how are you", "bye"); returns the
// id of the last event (the usual fork point).
struct RecordedRun {
  store::RunId run{"run_rec"};
  store::EventId last{"evt_004"};
};
RecordedRun record_parent_run(store::EventStore& store);

// The events of `run` after `after_seq`.
std::vector<store::Event> events_after(store::EventStore& store, const std::string& run,
                                       std::uint64_t after_seq);

}  // namespace forktrial::testing
