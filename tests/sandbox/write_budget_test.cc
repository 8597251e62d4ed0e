// What a trial may write, and what the parent records of it: the write
// budget bounds events and bytes whatever wrote them, and the parent takes
// the child's delta as untrusted input — streamed, bounded, and refused from
// the first event only the parent may write.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/sandbox/trial_fixture.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using testing::contains;
using testing::scenario_only;
using testing::TrialFixture;

namespace {

// Runs the misbehaving stand-in child in `mode` (tests/sandbox/hostile_child.cc).
TrialReport hostile_trial(TrialFixture& f, const std::string& mode, const TrialLimits& limits) {
  ChildOptions options;
  options.child_path = FORKTRIAL_HOSTILE_CHILD;
  options.extra_env = {"FORKTRIAL_HOSTILE=" + mode};
  return f.trial(f.pack(scenario_only("")), "scenarios/main.lua", limits, {}, options);
}

TrialLimits small_budget() {
  TrialLimits limits;
  limits.wall_clock_seconds = 30;
  limits.max_events = 10;
  limits.max_appended_events = 100;
  return limits;
}

}  // namespace

TEST_CASE("a scenario emitting without end is stopped by the write budget", "[trial][budget]") {
  TrialFixture f;
  // Nothing is dispatched, so the event budget (max_events) never counts.
  auto report = f.trial(f.pack(scenario_only("while true do rt:emit{ type = 'spam' } end")),
                        "scenarios/main.lua", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(contains(report.detail, "write budget exhausted"));
  const auto events = f.fork_events(report);
  REQUIRE(events.size() == 101);  // the budget, then the closing record
  CHECK(report.events_appended == 101);
  CHECK(events.back().type == "runtime.budget_exhausted");
  CHECK(events.back().actor == "runtime");
  const auto closing = nlohmann::json::parse(events.back().payload);
  CHECK(closing["exhausted_by"] == "max_appended_events");
  CHECK(closing["appended_events"] == 100);
  CHECK(events[99].type == "spam");
}

TEST_CASE("catching the write budget's error does not let a scenario go on", "[trial][budget]") {
  TrialFixture f;
  auto report =
      f.trial(f.pack(scenario_only("for i = 1, 1000 do pcall(rt.emit, rt, { type = 'spam' }) end\n"
                                   "rt:emit{ type = 'after' }")),
              "scenarios/main.lua", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(report.events_appended == 101);
}

TEST_CASE("large payloads are stopped by the write budget's bytes", "[trial][budget]") {
  TrialFixture f;
  TrialLimits limits = small_budget();
  limits.max_appended_bytes = 1 << 20;
  auto report =
      f.trial(f.pack(scenario_only(
                  "local big = string.rep('x', 100000)\n"
                  "for i = 1, 1000 do rt:emit{ type = 'big', payload = { x = big } } end")),
              "scenarios/main.lua", limits);
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  const auto events = f.fork_events(report);
  REQUIRE(events.size() == 12);  // pack.loaded, 10 payloads of 100 kB, the closing record
  const auto closing = nlohmann::json::parse(events.back().payload);
  CHECK(closing["exhausted_by"] == "max_appended_bytes");
  std::uint64_t bytes = 0;
  for (const auto& event : events) bytes += store::event_text_bytes(event);
  CHECK(bytes <= limits.max_appended_bytes + 4096);
}

TEST_CASE("a child's forged parent record is never recorded", "[trial][budget]") {
  TrialFixture f;
  auto report = hostile_trial(f, "forge", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::crashed);
  const auto events = f.fork_events(report);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == "chat.message");
  CHECK(report.events_appended == 1);
  CHECK(contains(report.detail,
                 "poses as a parent record (type \"trial.wall_clock_exhausted\", actor "
                 "\"forktrial.parent\"); only the parent writes those"));
}

TEST_CASE("a child's event stamped before the one it follows is never recorded",
          "[trial][budget]") {
  TrialFixture f;
  auto report = hostile_trial(f, "backwards", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::crashed);
  const auto events = f.fork_events(report);
  REQUIRE(events.size() == 1);
  CHECK(events[0].payload == R"({"text":"on time"})");
  CHECK(contains(report.detail,
                 "does not continue the fork: event evt_7 is stamped 2000-01-01T00:00:00Z, before "
                 "the event it follows"));
}

TEST_CASE("the parent records no more than the write budget whatever the child wrote",
          "[trial][budget]") {
  TrialFixture f;
  auto report = hostile_trial(f, "flood", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(report.events_appended == 101);  // the budget and the closing record's allowance
  CHECK(f.fork_events(report).size() == 101);
  CHECK(contains(report.detail, "write budget: the child's delta goes past"));
}

TEST_CASE("the parent records no more bytes than the write budget", "[trial][budget]") {
  TrialFixture f;
  TrialLimits limits = small_budget();
  limits.max_appended_bytes = 4 << 20;
  auto report = hostile_trial(f, "bytes", limits);
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  std::uint64_t bytes = 0;
  for (const auto& event : f.fork_events(report)) bytes += store::event_text_bytes(event);
  CHECK(bytes <= limits.max_appended_bytes + 4096);
  // Four payloads of 1 MiB and a few bytes fit in 4 MiB and the closing
  // record's allowance of 4 kB; a fifth does not.
  CHECK(report.events_appended == 4);
}

TEST_CASE("a behavior the write budget stops is no behavior failure, in the tail as in the store",
          "[trial][budget]") {
  TrialFixture f;
  testing::PackSpec spec;
  spec.behaviors = {"flood"};
  spec.pack_lua =
      R"(local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
  pack:behavior{ name = "flood", on = {"go"},
    run = function(event, graph, ctx) while true do graph:emit{ type = "spam" } end end }
  return pack)";
  spec.files["scenarios/main.lua"] =
      "function main(rt) rt:emit{ type = 'go' } rt:run_until_idle() end\n";
  auto report = f.trial(f.pack(spec), "scenarios/main.lua", small_budget());
  INFO(report.detail);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(contains(report.detail, "write budget exhausted"));
  // The behavior's failure record would not fit: none is counted, by the
  // child's claim or by the store, and they agree.
  CHECK(report.behavior_failures_after_fork == 0);
  CHECK_FALSE(contains(report.detail, "tail claimed"));
  const auto events = f.fork_events(report);
  CHECK(events.back().type == "runtime.budget_exhausted");
  for (const auto& e : events) CHECK(e.type != "behavior.failed");
}
