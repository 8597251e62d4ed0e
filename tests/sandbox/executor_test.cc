#include "sandbox/executor.h"

#include <catch2/catch.hpp>

#include "tests/sandbox/recording_executor.h"
#include "tests/sandbox/trial_fixture.h"

using namespace forktrial;
using namespace forktrial::sandbox;

TEST_CASE("the local executor states its guarantees honestly", "[sandbox][executor]") {
  LocalSubprocessExecutor executor;
  const auto& g = executor.isolation();
  CHECK(g.process.provided);
  CHECK(g.environment.provided);
  CHECK_FALSE(g.filesystem.provided);
  CHECK_FALSE(g.network.provided);
  CHECK_FALSE(g.syscalls.provided);
  CHECK_FALSE(g.security_sandbox.provided);
  for (const Guarantee* each :
       {&g.process, &g.filesystem, &g.network, &g.syscalls, &g.environment, &g.security_sandbox}) {
    CHECK_FALSE(each->how.empty());
  }
}

TEST_CASE("the local executor runs a specification in a child", "[sandbox][executor]") {
  testing::TempDir dir;
  store::EventStore store(dir.path() / "store");
  auto recorded = testing::record_parent_run(store);
  testing::PackSpec pack;
  pack.pack_lua =
      R"(return forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} })";
  pack.files["s.lua"] = "function main(rt) rt:emit{ type = 'hello', payload = {} } end\n";
  const auto root = dir.path() / "pack";
  TrialSpecification spec;
  spec.parent_run_id = recorded.run;
  spec.at_event = store::EventId("evt_002");
  spec.candidate = {root.string(), Digest::parse(testing::write_pack(root, pack)), true};
  spec.scenario = "s.lua";
  LocalSubprocessExecutor executor;
  auto report = executor.execute(store, spec);
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
  auto events = testing::events_after(store, report.fork_run_id, 2);
  REQUIRE(events.size() == report.events_appended);
  CHECK(events.front().type == "pack.loaded");
  CHECK(events.back().type == "hello");
}

TEST_CASE("the recording executor records specifications and answers as told",
          "[sandbox][executor]") {
  testing::TempDir dir;
  store::EventStore store(dir.path() / "store");
  testing::RecordingExecutor executor;
  TrialSpecification spec;
  spec.parent_run_id = store::RunId("r");
  spec.at_event = store::EventId("e");
  TrialReport scripted;
  scripted.outcome = Outcome::scenario_failed;
  scripted.detail = "scripted";
  executor.queue_report(scripted);
  CHECK(executor.execute(store, spec).detail == "scripted");
  CHECK(executor.execute(store, spec).outcome == Outcome::completed);
  CHECK(executor.executed().size() == 2);
  CHECK(executor.executed()[0] == spec);
  CHECK_FALSE(executor.isolation().process.provided);
}
