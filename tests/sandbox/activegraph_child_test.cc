// The activegraph executor (sandbox/activegraph_child.h) against the stand-in
// of activegraph's trial child in tests/python/standin, written from its
// contract (activegraph itself cannot be installed here): every outcome path,
// the store round trip, and what a child that lies or runs away gets.
#include "sandbox/activegraph_child.h"

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pack/bundle_hash.h"
#include "sandbox/delta.h"
#include "tests/sandbox/trial_fixture.h"
#include "tests/support/skip.h"

namespace forktrial::sandbox {
namespace {

using testing::TrialFixture;

const std::string kStandin = FORKTRIAL_SOURCE_DIR "/tests/python/standin";

// The stand-in, found the way a user's activegraph is: by asking the
// interpreter, with it on PYTHONPATH.
ActivegraphInstall standin() {
  auto found = find_activegraph("python3");
  ActivegraphInstall install;
  install.python = found ? found->python : std::filesystem::path("/usr/bin/python3");
  install.python_path = {kStandin};
  install.version = "0.0.0+standin";
  return install;
}

// An activegraph-shaped pack: __init__.py (its module) and scenarios.py.
PackSource python_pack(TrialFixture& f, const std::string& name, const std::string& init,
                       const std::string& scenarios) {
  const auto root = f.dir.path() / "packs" / name;
  f.dir.write("packs/" + name + "/__init__.py", init);
  f.dir.write("packs/" + name + "/scenarios.py", scenarios);
  return PackSource{root.string(), std::nullopt, false};
}

// Scenarios, one per way a child can end.
const std::string kScenarios = [] {
  std::ifstream in(FORKTRIAL_SOURCE_DIR "/tests/python/outcome_scenarios.py");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}();

struct Run {
  TrialFixture f;
  std::vector<std::byte> segment;
  store::RunId fork_id;
  PackSource candidate;

  Run() {
    auto snapshot = f.store.snapshot();
    auto parent = snapshot.run(f.recorded.run);
    REQUIRE(parent);
    const auto point = snapshot.find_event(*parent, f.recorded.last);
    REQUIRE(point);
    segment = snapshot.segment(*parent, point->seq);
    fork_id = f.store.new_run_id();
    candidate = python_pack(f, "candidate", "PACK = 'candidate'\n", kScenarios);
  }

  ExecutedTrial trial(const std::string& scenario, TrialLimits limits = {},
                      std::optional<PackSource> pack = std::nullopt) {
    TrialSpecification spec = testing::specification(f.recorded, pack.value_or(candidate),
                                                     "scenarios.py::" + scenario, limits);
    return execute_activegraph_trial(segment, spec, fork_id, standin());
  }

  // The trial recorded as the store's holder records it, and its report.
  TrialReport recorded(const std::string& scenario, TrialLimits limits = {}) {
    TrialSpecification spec =
        testing::specification(f.recorded, candidate, "scenarios.py::" + scenario, limits);
    const ExecutedTrial executed = execute_activegraph_trial(segment, spec, fork_id, standin());
    const store::NewRun record{.id = fork_id, .label = spec.label};
    auto written = f.store.write([&](store::Writer& writer) {
      return record_trial(writer, spec, record, executed.events.size(), delta_of(executed.events),
                          executed.verdict);
    });
    REQUIRE(written);
    return report_from_store(f.store.snapshot(), fork_id, executed.fork_seq, executed.verdict);
  }
};

TEST_CASE("the stand-in is found the way activegraph is, and answers the preflight",
          "[trial][activegraph]") {
  auto missing = find_activegraph("python3");
  if (missing) {
    // This machine has an activegraph of its own: nothing to check here.
    SUCCEED("activegraph " + missing->version + " is installed");
  } else {
    CHECK(missing.error().code == ErrorCode::unavailable);
    CHECK_THAT(missing.error().message, Catch::Contains("activegraph does not import") &&
                                            Catch::Contains("ModuleNotFoundError"));
  }
  auto absent = find_activegraph("no-such-python-here");
  REQUIRE_FALSE(absent);
  CHECK_THAT(absent.error().message, Catch::Contains("no Python interpreter"));
  CHECK_FALSE(activegraph_preflight(standin()));
}

TEST_CASE("a completed activegraph trial's rows come back as its delta, byte for byte",
          "[trial][activegraph]") {
  Run r;
  const TrialReport report = r.recorded("complete");
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
  CHECK(report.events_appended == 2);
  const auto events = r.f.fork_events(report);
  REQUIRE(events.size() >= 2);
  CHECK(events[0].type == "custom.noted");
  CHECK(events[0].actor == "standin.pack");
  CHECK(events[0].payload == "{\"n\": 1, \"text\": \"caf\xc3\xa9 \xe2\x80\x98x\xe2\x80\x99\"}");
  CHECK(events[1].payload == "{\"n\": 2}");
}

TEST_CASE("every way activegraph's child can end is the outcome activegraph's parent reads",
          "[trial][activegraph]") {
  Run r;
  SECTION("a scenario that raises") {
    const auto executed = r.trial("fail");
    CHECK(executed.verdict.outcome == Outcome::scenario_failed);
    CHECK_THAT(executed.verdict.detail, Catch::Contains("ValueError: the candidate gave up"));
    CHECK(executed.events.size() == 1);  // what it appended before it failed is kept
  }
  SECTION("a pack that does not import") {
    const auto broken =
        python_pack(r.f, "broken", "raise ImportError('no such thing')\n", kScenarios);
    const auto executed = r.trial("complete", {}, broken);
    CHECK(executed.verdict.outcome == Outcome::materialization_failed);
    CHECK(executed.verdict.exit_code == 50);
    CHECK_THAT(executed.verdict.detail, Catch::Contains("ImportError: no such thing"));
    CHECK(executed.events.empty());
  }
  SECTION("a pack that is not the one pinned, checked before the child starts") {
    PackSource pinned = r.candidate;
    pinned.expected_bundle_hash = Sha256::of("another pack");
    const auto executed = r.trial("complete", {}, pinned);
    CHECK(executed.verdict.outcome == Outcome::materialization_failed);
    CHECK_THAT(executed.verdict.detail,
               Catch::Contains("is not the one pinned, so activegraph's child was not started"));
    CHECK(executed.events.empty());
    CHECK(executed.fork_seq == 5);
    // Pinned right, it runs.
    auto pin = pack::bundle_hash(r.candidate.root_dir);
    REQUIRE(pin);
    pinned.expected_bundle_hash = *pin;
    CHECK(r.trial("complete", {}, pinned).verdict.outcome == Outcome::completed);
  }
  SECTION("a tail that says completed over exit code 30") {
    const auto executed = r.trial("lie");
    CHECK(executed.verdict.outcome == Outcome::crashed);
    CHECK_THAT(executed.verdict.detail,
               Catch::Contains("tail says \"completed\" but it exited with code 30"));
    CHECK_FALSE(executed.verdict.claimed_events);
  }
  SECTION("a crash before the tail") {
    const auto executed = r.trial("crash");
    CHECK(executed.verdict.outcome == Outcome::crashed);
    CHECK(executed.verdict.exit_code == -SIGSEGV);
    CHECK(executed.events.size() == 1);
  }
  SECTION("a sleep past the wall clock") {
    TrialLimits limits;
    limits.wall_clock_seconds = 0.5;
    const auto executed = r.trial("sleep", limits);
    CHECK(executed.verdict.outcome == Outcome::limits_exceeded);
    CHECK(executed.verdict.wall_clock_killed);
    CHECK(executed.verdict.net == Net::wall_clock);
    CHECK_THAT(executed.verdict.detail, Catch::Contains("wall clock exceeded 0.5s"));
  }
  SECTION("an allocation past the memory cap") {
    TrialLimits limits;
    limits.max_rss_bytes = std::uint64_t{256} << 20;
    const auto executed = r.trial("allocate", limits);
    CHECK(executed.verdict.outcome == Outcome::limits_exceeded);
    CHECK(executed.verdict.exit_code == 40);
    CHECK(executed.verdict.net == Net::memory);
    CHECK_THAT(executed.verdict.detail, Catch::Contains("MemoryError"));
  }
  SECTION("more rows than the write budget") {
    TrialLimits limits;
    limits.max_appended_events = 10;
    const auto executed = r.trial("flood", limits);
    CHECK(executed.verdict.outcome == Outcome::limits_exceeded);
    // The budget, and the one closing record every delta may add to it.
    CHECK(executed.events.size() == 11);
    CHECK(executed.verdict.net == Net::write_budget);
    CHECK_THAT(executed.verdict.detail, Catch::Contains("write budget"));
  }
  SECTION("one row longer than the whole write budget") {
    TrialLimits limits;
    limits.max_appended_bytes = 1 << 20;
    const auto executed = r.trial("hoard_row", limits);
    // Not completed with nothing recorded: past the budget after what fit,
    // the long row never read.
    CHECK(executed.verdict.outcome == Outcome::limits_exceeded);
    CHECK(executed.verdict.net == Net::write_budget);
    CHECK_THAT(executed.verdict.detail,
               Catch::Contains("write budget") && Catch::Contains("max_appended_bytes = 1048576"));
    REQUIRE_FALSE(executed.events.empty());
    CHECK(executed.events.front().type == "custom.noted");
    for (const auto& event : executed.events) CHECK(event.type != "custom.hoard");
  }
  SECTION("a row only the parent writes") {
    const auto executed = r.trial("forge");
    CHECK(executed.verdict.outcome == Outcome::crashed);
    CHECK(executed.events.empty());
    CHECK_THAT(executed.verdict.detail, Catch::Contains("trial.result"));
  }
}

TEST_CASE("a memory cap activegraph takes is taken, though forktrial's Lua child needs more",
          "[trial][activegraph]") {
  Run r;
  TrialLimits limits;
  limits.max_rss_bytes = std::uint64_t{32} << 20;
  CHECK(check_trial_limits(limits).empty());
  REQUIRE(lua_limits_problem(limits));
  CHECK_THAT(*lua_limits_problem(limits), Catch::Contains("below the 67108864 (64 MiB)"));
  const TrialReport report = r.recorded("complete", limits);
  CHECK(report.outcome == Outcome::completed);
  CHECK(report.events_appended == 2);
  // activegraph's tail counts the whole log's behavior failures; read as
  // those after the fork, it agrees with the store.
  CHECK(report.detail.empty());
  const auto hoarded = r.trial("allocate", limits);
  CHECK(hoarded.verdict.outcome == Outcome::limits_exceeded);
  CHECK_THAT(hoarded.verdict.detail, Catch::Contains("MemoryError"));
}

TEST_CASE("the fork's row carries its parent's goal and frame id to activegraph's child",
          "[trial][activegraph]") {
  Run r;
  const auto read_context = [&](const ParentRunContext& parent) {
    const TrialSpecification spec =
        testing::specification(r.f.recorded, r.candidate, "scenarios.py::context", {});
    const auto executed =
        execute_activegraph_trial(r.segment, spec, r.fork_id, standin(), {}, parent);
    REQUIRE(executed.verdict.outcome == Outcome::completed);
    REQUIRE(executed.events.size() == 1);
    return nlohmann::json::parse(executed.events[0].payload);
  };
  CHECK(read_context({"find the bug", "frame_7"}) ==
        nlohmann::json{{"goal", "find the bug"}, {"frame_id", "frame_7"}});
  CHECK(read_context({}) == nlohmann::json{{"goal", nullptr}, {"frame_id", nullptr}});
}

TEST_CASE("under strict isolation activegraph's child runs confined, as forktrial's own does",
          "[trial][activegraph][strict]") {
  if (const auto why = testing::strict_unavailable()) {
    forktrial::testing::skip(*why);
    return;
  }
  Run r;
  ChildOptions strict;
  strict.isolation = Isolation::strict;
  const auto trial = [&](const std::string& scenario, const ChildOptions& options,
                         TrialLimits limits = {}) {
    const TrialSpecification spec =
        testing::specification(r.f.recorded, r.candidate, "scenarios.py::" + scenario, limits);
    return execute_activegraph_trial(r.segment, spec, r.fork_id, standin(), options);
  };
  const auto completed = trial("complete", strict);
  INFO(completed.verdict.detail);
  CHECK(completed.verdict.outcome == Outcome::completed);
  CHECK(completed.events.size() == 2);
  testing::check_no_degraded_net(completed.verdict.warnings);

  // The host's files are out of sight or read-only; standard isolation, the
  // control, reaches them.
  const auto reached = [&](const ChildOptions& options) {
    const auto executed = trial("confined", options);
    REQUIRE(executed.verdict.outcome == Outcome::completed);
    REQUIRE(executed.events.size() == 1);
    return nlohmann::json::parse(executed.events[0].payload);
  };
  const auto confined = reached(strict);
  CHECK(confined["etc"] == "FileNotFoundError");
  CHECK(confined["tmp"] != "reached");
  CHECK(confined["usr"] != "reached");
  CHECK_FALSE(std::filesystem::exists("/tmp/forktrial-escape"));
  CHECK_FALSE(std::filesystem::exists("/usr/forktrial-escape"));
  CHECK(reached({})["etc"] == "reached");
  std::filesystem::remove("/tmp/forktrial-escape");
  std::filesystem::remove("/usr/forktrial-escape");

  // A socket is a system call the filter refuses.
  const auto network = trial("network", strict);
  CHECK(network.verdict.outcome == Outcome::crashed);
  CHECK_THAT(network.verdict.detail, Catch::Contains("strict filter"));
  CHECK(network.events.empty());

  // The memory net holds in the launched interpreter.
  TrialLimits capped;
  capped.max_rss_bytes = std::uint64_t{256} << 20;
  const auto hoarded = trial("allocate", strict, capped);
  CHECK(hoarded.verdict.outcome == Outcome::limits_exceeded);
  CHECK(hoarded.verdict.net == Net::memory);
}

TEST_CASE("run_trial sends an activegraph pack to activegraph's child, and records its delta",
          "[trial][activegraph]") {
  Run r;
  // A real activegraph manifest makes the directory an activegraph pack.
  std::ifstream manifest(FORKTRIAL_SOURCE_DIR
                         "/tests/pack/data/activegraph-packs/chat/manifest.toml");
  std::stringstream text;
  text << manifest.rdbuf();
  r.f.dir.write("packs/candidate/manifest.toml", text.str());
  ChildOptions options;
  options.activegraph = standin();
  const TrialSpecification spec =
      testing::specification(r.f.recorded, r.candidate, "scenarios.py::complete");
  const TrialReport report = run_trial(r.f.store, spec, options);
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
  CHECK(report.events_appended == 2);
  CHECK(report.executor == "activegraph");
  CHECK(report.executor_version == "0.0.0+standin");
  const auto events = r.f.fork_events(report);
  REQUIRE_FALSE(events.empty());
  CHECK(events[0].type == "custom.noted");
  // And on a worker's path, from the segment.
  const ExecutedTrial executed = execute_trial(r.segment, spec, r.fork_id, options);
  CHECK(executed.verdict.outcome == Outcome::completed);
  CHECK(executed.events.size() == 2);
  // With no activegraph where the interpreter looks, the trial cannot start.
  ChildOptions nowhere;
  nowhere.python = "no-such-python-here";
  CHECK_THROWS_AS(run_trial(r.f.store, spec, nowhere), SandboxStartupError);
}

TEST_CASE("the job activegraph's child reads names the fork, the packs and its limits",
          "[trial][activegraph]") {
  TrialSpecification spec;
  spec.parent_run_id = store::RunId("run_rec");
  spec.at_event = store::EventId("evt_005");
  spec.candidate = PackSource{"/packs/candidate", std::nullopt, true};
  spec.extra_packs = {PackSource{"/packs/extra", std::nullopt, false}};
  spec.scenario = "scenarios.py::main";
  spec.limits.wall_clock_seconds = 12.7;
  spec.limits.max_rss_bytes = std::nullopt;
  const auto job = nlohmann::json::parse(
      activegraph_job("/tmp/s/activegraph.db", store::RunId("run_f"), 5, spec));
  CHECK(job == nlohmann::json::parse(R"({
    "store_path": "/tmp/s/activegraph.db", "fork_run_id": "run_f", "initial_events": 5,
    "pack_root": "/packs/candidate", "expected_bundle_hash": "", "manifest_required": true,
    "extra_packs": [{"pack_root": "/packs/extra", "expected_bundle_hash": "",
                     "manifest_required": false}],
    "scenario": "scenarios.py::main",
    "limits": {"max_rss_bytes": null, "max_events": 2000, "max_llm_calls": 0,
               "cpu_seconds": 17}})"));
}

}  // namespace
}  // namespace forktrial::sandbox
