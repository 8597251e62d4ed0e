// A trial run on one machine and recorded on another, as a worker and the
// coordinator split it: execute_trial against the parent's segment, then
// record_trial and report_from_store in the store that holds the parent. The
// fork recorded that way is the one run_trial records in one place.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sandbox/delta.h"
#include "sandbox/trial.h"
#include "tests/sandbox/trial_fixture.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using forktrial::testing::contains;
using forktrial::testing::PackSpec;
using forktrial::testing::scenario_only;

namespace {

// What a worker does with a trial and a coordinator with its result: the
// segment leaves the store, the child runs against it elsewhere, and the
// events come back to be recorded.
TrialReport split_trial(testing::TrialFixture& f, const TrialSpecification& spec) {
  std::vector<std::byte> segment;
  {
    auto snapshot = f.store.snapshot();
    auto parent = snapshot.run(spec.parent_run_id);
    REQUIRE(parent);
    const auto point = snapshot.find_event(*parent, spec.at_event);
    REQUIRE(point);
    segment = snapshot.segment(*parent, point->seq);
  }
  const store::RunId fork_id = f.store.new_run_id();
  const ExecutedTrial executed = execute_trial(segment, spec, fork_id);
  const store::NewRun record{.id = fork_id, .label = spec.label};
  auto recorded = f.store.write([&](store::Writer& writer) {
    return record_trial(writer, spec, record, executed.events.size(), delta_of(executed.events),
                        executed.verdict);
  });
  REQUIRE(recorded);
  return report_from_store(f.store.snapshot(), fork_id, executed.fork_seq, executed.verdict);
}

std::vector<std::string> own_types(testing::TrialFixture& f, const TrialReport& report) {
  return testing::TrialFixture::types(f.fork_events(report));
}

}  // namespace

TEST_CASE("a trial executed on a segment and recorded elsewhere is the trial run_trial records",
          "[trial][split]") {
  testing::TrialFixture f;
  PackSpec spec = scenario_only(
      "rt:emit{ type = 'note', payload = { n = 1 } }\n"
      "rt:run_goal('water the plants')");
  const auto candidate = f.pack(spec);
  const auto trial = testing::specification(f.recorded, candidate, "scenarios/main.lua");
  const TrialReport here = run_trial(f.store, trial);
  const TrialReport split = split_trial(f, trial);
  INFO(split.detail);
  CHECK(split.outcome == Outcome::completed);
  CHECK(split.outcome == here.outcome);
  CHECK(split.events_appended == here.events_appended);
  CHECK(split.behavior_failures == here.behavior_failures);
  CHECK(split.detail == here.detail);
  CHECK(own_types(f, split) == own_types(f, here));
  // The same bytes, event by event, but for the run id in provenance.
  const auto a = f.fork_events(here);
  const auto b = f.fork_events(split);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].id == b[i].id);
    CHECK(a[i].timestamp == b[i].timestamp);
  }
}

TEST_CASE("a split trial stopped by the wall clock records the parent's record on the store side",
          "[trial][split]") {
  testing::TrialFixture f;
  TrialLimits limits;
  limits.wall_clock_seconds = 1;
  const auto candidate =
      f.pack(scenario_only("rt:emit{ type = 'started', payload = {} }\n"
                           "while true do end"));
  const auto report =
      split_trial(f, testing::specification(f.recorded, candidate, "scenarios/main.lua", limits));
  CHECK(report.outcome == Outcome::limits_exceeded);
  const auto types = own_types(f, report);
  REQUIRE_FALSE(types.empty());
  CHECK(types.back() == "trial.wall_clock_exhausted");
}

TEST_CASE("the store side refuses a delta that does not continue the fork, writing nothing",
          "[trial][split]") {
  testing::TrialFixture f;
  const auto candidate = f.pack(scenario_only("rt:emit{ type = 'note', payload = {} }"));
  const auto trial = testing::specification(f.recorded, candidate, "scenarios/main.lua");
  const auto runs_before = f.store.snapshot().runs().size();
  auto attempt = [&](std::vector<store::NewEvent> events) {
    const store::NewRun record{.id = f.store.new_run_id(), .label = "forged"};
    return f.store.write([&](store::Writer& writer) {
      return record_trial(writer, trial, record, events.size(), delta_of(events), TrialVerdict{});
    });
  };
  store::NewEvent early{.id = store::EventId("evt_100"),
                        .type = "note",
                        .payload = "{}",
                        .timestamp = "1999-01-01T00:00:00Z"};
  auto refused = attempt({early});
  REQUIRE_FALSE(refused);
  CHECK(contains(refused.error().message, "event evt_100 is stamped 1999-01-01T00:00:00Z"));
  store::NewEvent taken = early;
  taken.id = store::EventId("evt_002");  // already in the parent's history
  taken.timestamp = "2030-01-01T00:00:00Z";
  CHECK_FALSE(attempt({taken}));
  store::NewEvent unstamped = early;
  unstamped.timestamp = "yesterday";
  auto bad = attempt({unstamped});
  REQUIRE_FALSE(bad);
  CHECK(contains(bad.error().message, "not ISO-8601 UTC"));
  CHECK(f.store.snapshot().runs().size() == runs_before);
}

TEST_CASE("a segment that is not one is a setup error on the executing side", "[trial][split]") {
  testing::TrialFixture f;
  const auto candidate = f.pack(scenario_only("rt:emit{ type = 'note', payload = {} }"));
  const auto trial = testing::specification(f.recorded, candidate, "scenarios/main.lua");
  const std::vector<std::byte> garbage(64, std::byte{7});
  CHECK_THROWS_AS(execute_trial(garbage, trial, store::RunId("run_x")), TrialSetupError);
}
