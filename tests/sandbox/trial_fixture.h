// Test support for trials: a recorded parent run in a fresh store, and packs
// written into a scratch directory with a manifest whose content hash is
// computed from the files written, so each test states only what it varies.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sandbox/trial.h"
#include "store/event_store.h"
#include "tests/support/temp_dir.h"

namespace forktrial::testing {

struct PackSpec {
  std::string name = "candidate";
  std::string version = "0.1.0";
  std::vector<std::string> object_types;
  std::vector<std::string> relation_types;
  std::vector<std::string> behaviors;        // declared in the manifest
  std::string lua;                           // pack.lua
  std::map<std::string, std::string> files;  // other files (scenarios), relative path -> text
};

// Writes the pack into `dir` (created) and returns its bundle hash.
std::string write_pack(const std::filesystem::path& dir, const PackSpec& spec);

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
