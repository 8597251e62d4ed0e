// Test support for trials: a recorded parent run in a fresh store (packs are
// written with tests/support/pack_writer.h).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/isolation.h"
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
  store::EventId last{"evt_005"};
};
RecordedRun record_parent_run(store::EventStore& store);

// The events of `run` after `after_seq`.
std::vector<store::Event> events_after(store::EventStore& store, const std::string& run,
                                       std::uint64_t after_seq);

// A pack with no behaviors whose scenario scenarios/main.lua is `body` (the
// inside of main(rt)).
PackSpec scenario_only(const std::string& body);

bool contains(const std::string& text, const std::string& part);

// A trial of `candidate` on a fork of `recorded` at its last event.
sandbox::TrialSpecification specification(const RecordedRun& recorded,
                                          const sandbox::PackSource& candidate,
                                          const std::string& scenario,
                                          const sandbox::TrialLimits& limits = {},
                                          const std::vector<sandbox::PackSource>& extras = {});

// A temporary store holding the recorded run, packs written beside it, and
// trials run on forks of the recorded run at its last event.
struct TrialFixture {
  TempDir dir;
  store::EventStore store{dir.path() / "store"};
  RecordedRun recorded = record_parent_run(store);

  sandbox::PackSource pack(const PackSpec& spec, const std::string& name = "candidate");
  sandbox::TrialReport trial(const sandbox::PackSource& candidate, const std::string& scenario,
                             const sandbox::TrialLimits& limits = {},
                             const std::vector<sandbox::PackSource>& extras = {},
                             const sandbox::ChildOptions& options = {});
  // The fork's own events (after the recorded run's four).
  std::vector<store::Event> fork_events(const sandbox::TrialReport& report);
  static std::vector<std::string> types(const std::vector<store::Event>& events);
};

// Checks that no net was degraded; a sanitized child cannot hold the
// address-space cap (RLIMIT_AS) and says so, the one warning it may give.
inline void check_no_degraded_net(const std::vector<std::string>& warnings) {
  for (const std::string& warning : warnings) {
    INFO(warning);
#ifdef FORKTRIAL_SANITIZED
    CHECK(warning.starts_with("memory net degraded: setrlimit(RLIMIT_AS"));
#else
    CHECK(false);
#endif
  }
}

// Why strict isolation cannot be tested here, if it cannot: the reason of
// each net in `needed` that does not apply on this host.
inline std::optional<std::string> strict_unavailable(const std::vector<std::string>& needed = {
                                                         "namespaces", "seccomp"}) {
  std::string why;
  for (const auto& net : sandbox::probe_strict_nets()) {
    if (!net.applies && std::find(needed.begin(), needed.end(), net.name) != needed.end()) {
      why += (why.empty() ? "" : "; ") + net.name + ": " + net.how;
    }
  }
  if (why.empty()) return std::nullopt;
  return why;
}

}  // namespace forktrial::testing
