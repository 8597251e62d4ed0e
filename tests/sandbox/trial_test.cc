// run_trial and preflight with real forktrial-child processes: one
// test per behaviour of the trial contract.
#include "sandbox/trial.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/unique_fd.h"
#include "pack/bundle_hash.h"
#include "runtime/reserved_names.h"
#include "sandbox/scratch.h"
#include "sandbox/spawn.h"
#include "tests/sandbox/child_probe.h"
#include "tests/sandbox/dir_listing.h"
#include "tests/sandbox/trial_fixture.h"
#include "tests/support/skip.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using forktrial::testing::PackSpec;
using forktrial::testing::TempDir;

namespace {

const char* kGreeterLua = R"(
local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {"greeting"},
  relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
pack:behavior{ name = "greeter", on = {"goal.created"},
  run = function(event, graph, ctx) graph:add_object("greeting", { text = "hi " .. event.payload.goal }) end }
return pack
)";

PackSpec greeter() {
  PackSpec spec;
  spec.object_types = {"greeting"};
  spec.behaviors = {"greeter"};
  spec.pack_lua = kGreeterLua;
  spec.files["scenarios/main.lua"] = "function main(rt) rt:run_goal('water the plants') end\n";
  return spec;
}

using Fixture = testing::TrialFixture;
using testing::contains;
using testing::scenario_only;

std::filesystem::path write_script(const TempDir& dir, const std::string& name,
                                   const std::string& body) {
  auto path = dir.write(name, "#!/bin/sh\n" + body + "\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("1. a well-behaved candidate completes and only its fork changes", "[trial]") {
  Fixture f;
  const auto parent_before = testing::events_after(f.store, "run_rec", 0);
  auto report = f.trial(f.pack(greeter()), "scenarios/main.lua");
  INFO(report.detail);
  CHECK(report.outcome == Outcome::completed);
  CHECK(report.exit_code == 0);
  CHECK(report.behavior_failures == 0);
#ifdef FORKTRIAL_SANITIZED
  // The default memory net cannot hold a sanitized child; it says so.
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0].starts_with("memory net degraded"));
#else
  CHECK(report.warnings.empty());
#endif
  auto events = f.fork_events(report);
  CHECK(report.events_appended == events.size());
  CHECK(report.events_appended > 0);
  int greetings = 0;
  for (const auto& e : events) {
    if (e.type == "object.created") {
      ++greetings;
      CHECK(nlohmann::json::parse(e.payload)["object"]["type"] == "greeting");
    }
  }
  CHECK(greetings == 1);
  CHECK(testing::events_after(f.store, "run_rec", 0) == parent_before);
  auto fork = f.store.snapshot().run(store::RunId(report.fork_run_id));
  REQUIRE(fork);
  REQUIRE(fork->fork_of);
  CHECK(fork->fork_of->parent.str() == "run_rec");
  CHECK(fork->fork_of->event_id.str() == "evt_005");
}

TEST_CASE("2. a wrong pin fails materialization and loads nothing", "[trial]") {
  Fixture f;
  PackSource candidate = f.pack(greeter());
  const std::string actual = candidate.expected_bundle_hash->str();
  candidate.expected_bundle_hash = Digest::parse("sha256:" + std::string(64, '0'));
  auto wrong = f.trial(candidate, "scenarios/main.lua");
  CHECK(wrong.outcome == Outcome::materialization_failed);
  CHECK(wrong.exit_code == 50);
  CHECK(contains(wrong.detail, "bundle hash mismatch"));
  CHECK(contains(wrong.detail, "sha256:" + std::string(64, '0')));
  CHECK(contains(wrong.detail, actual));
  CHECK(wrong.events_appended == 0);
  CHECK(f.fork_events(wrong).empty());
}

TEST_CASE("limits out of range are refused before anything is forked or run", "[trial]") {
  Fixture f;
  PackSource candidate = f.pack(greeter());
  const auto runs_before = f.store.snapshot().runs().size();
  const auto refused = [&](double wall_clock) {
    TrialLimits limits;
    limits.wall_clock_seconds = wall_clock;
    try {
      f.trial(candidate, "scenarios/main.lua", limits);
    } catch (const TrialSetupError& e) {
      CHECK(e.kind() == TrialSetupError::Kind::invalid_specification);
      return std::string(e.what());
    }
    return std::string("ran");
  };
  const std::string head = "the trial specification is invalid:\n  limits.wall_clock_seconds: ";
  CHECK(refused(std::numeric_limits<double>::infinity()) ==
        head + "must be a finite, non-negative number of seconds (0 disables the net), got inf");
  CHECK(refused(std::nan("")) ==
        head + "must be a finite, non-negative number of seconds (0 disables the net), got nan");
  CHECK(refused(-1) ==
        head + "must be a finite, non-negative number of seconds (0 disables the net), got -1.0");
  CHECK(refused(1e300) == head +
                              "1e+300 s is more than the 7 days (604800.0 s) a trial may be "
                              "given; give less (0 disables the net)");
  CHECK(refused(1e-9) == head +
                             "1e-09 s is below the 1 ms the wall-clock net can measure; give at "
                             "least 0.001 (0 disables the net)");
  CHECK(f.store.snapshot().runs().size() == runs_before);
}

TEST_CASE("3. a scenario that raises is scenario_failed with message and traceback", "[trial]") {
  Fixture f;
  auto report =
      f.trial(f.pack(scenario_only("error('the plants are on fire')")), "scenarios/main.lua");
  CHECK(report.outcome == Outcome::scenario_failed);
  CHECK(report.exit_code == 30);
  CHECK(contains(report.detail, "the plants are on fire"));
  CHECK(contains(report.detail, "traceback"));
}

TEST_CASE("4. work beyond max_events is limits_exceeded by the event budget", "[trial]") {
  Fixture f;
  PackSpec spec;
  spec.behaviors = {"echo"};
  spec.pack_lua =
      R"(local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
  pack:behavior{ name = "echo", on = {"tick"},
    run = function(event, graph, ctx) graph:emit{ type = "tick", payload = { n = event.payload.n + 1 } } end }
  return pack)";
  spec.files["scenarios/main.lua"] =
      "function main(rt) rt:emit{ type = 'tick', payload = { n = 0 } } rt:run_until_idle() end\n";
  TrialLimits limits;
  limits.max_events = 25;
  auto report = f.trial(f.pack(spec), "scenarios/main.lua", limits);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(report.exit_code == 40);
  CHECK(contains(report.detail, "event budget"));
  auto events = f.fork_events(report);
  int exhausted = 0;
  for (const auto& e : events) exhausted += e.type == "runtime.budget_exhausted";
  CHECK(exhausted == 1);
}

TEST_CASE("5. a scenario spinning forever is stopped by the wall clock and recorded", "[trial]") {
  Fixture f;
  TrialLimits limits;
  limits.wall_clock_seconds = 2;
  auto report = f.trial(f.pack(scenario_only("rt:emit{ type = 'started', payload = {} }\n"
                                             "while true do end")),
                        "scenarios/main.lua", limits);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(contains(report.detail, "wall clock"));
  auto events = f.fork_events(report);
  REQUIRE_FALSE(events.empty());
  const auto& last = events.back();
  CHECK(last.type == "trial.wall_clock_exhausted");
  // The parent's record is one no candidate can write.
  CHECK(runtime::reserved_type(last.type).has_value());
  CHECK(runtime::reserved_actor(last.actor.value_or(""), "candidate", true).has_value());
  auto payload = nlohmann::json::parse(last.payload);
  CHECK(payload["wall_clock_seconds"] == 2);
  CHECK(payload["last_accepted_seq"] == last.seq - 1);
  CHECK(events.front().type == "pack.loaded");
}

TEST_CASE("6. a child killed by a signal or exiting oddly is crashed, with its stderr", "[trial]") {
  Fixture f;
  ChildOptions options;
  SECTION("signal") {
    options.child_path =
        write_script(f.dir, "segv.sh", "echo 'boom before dying' >&2; kill -SEGV $$");
    auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
    CHECK(report.outcome == Outcome::crashed);
    CHECK(report.exit_code == -SIGSEGV);
    CHECK(contains(report.detail, "signal 11 (SIGSEGV)"));
    CHECK(contains(report.detail, "boom before dying"));
    CHECK(f.store.snapshot().run(store::RunId(report.fork_run_id)));
    CHECK(f.fork_events(report).empty());
  }
  SECTION("unexpected exit code") {
    options.child_path =
        write_script(f.dir, "exit3.sh", "cat >/dev/null; echo 'odd exit' >&2; exit 3");
    auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
    CHECK(report.outcome == Outcome::crashed);
    CHECK(report.exit_code == 3);
    CHECK(contains(report.detail, "unexpected code 3"));
    CHECK(contains(report.detail, "odd exit"));
  }
}

TEST_CASE("7. surface mismatches between code and manifest fail materialization", "[trial]") {
  Fixture f;
  SECTION("a behavior the manifest does not declare") {
    PackSpec spec = greeter();
    spec.behaviors = {};
    auto report = f.trial(f.pack(spec), "scenarios/main.lua");
    CHECK(report.outcome == Outcome::materialization_failed);
    CHECK(contains(report.detail, "greeter"));
  }
  SECTION("a declared behavior never registered") {
    PackSpec spec = greeter();
    spec.behaviors = {"greeter", "ghost"};
    auto report = f.trial(f.pack(spec), "scenarios/main.lua");
    CHECK(report.outcome == Outcome::materialization_failed);
    CHECK(contains(report.detail, "ghost"));
  }
}

TEST_CASE("8. recorded-segment replay answers each message in order", "[trial]") {
  Fixture f;
  const std::string root = FORKTRIAL_SOURCE_DIR "/examples/packs/chat_echo";
  auto pin = pack::bundle_hash(root);
  REQUIRE(pin);
  auto report = f.trial(PackSource{root, *pin, true}, "scenarios/replay.lua");
  INFO(report.detail);
  REQUIRE(report.outcome == Outcome::completed);
  std::vector<std::string> replies;
  std::vector<std::string> replayed_actors;
  for (const auto& e : f.fork_events(report)) {
    auto payload = nlohmann::json::parse(e.payload);
    if (e.type == "object.created" && payload["object"]["type"] == "reply") {
      replies.push_back(payload["object"]["data"]["text"]);
    }
    if (e.type == "chat.message") replayed_actors.push_back(e.actor.value_or(""));
  }
  CHECK(replies ==
        std::vector<std::string>{"you said: hello", "you said: how are you", "you said: bye"});
  CHECK(replayed_actors == std::vector<std::string>(3, "trial.replay"));
}

TEST_CASE("9. extra packs load first and interact, and a bad extra pin fails the trial",
          "[trial]") {
  Fixture f;
  PackSpec trusted;
  trusted.name = "trusted";
  trusted.version = "1.0.0";
  trusted.behaviors = {"noter"};
  trusted.pack_lua =
      R"(local pack = forktrial.pack{ name = "trusted", version = "1.0.0", object_types = {},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
  pack:behavior{ name = "noter", on = {"goal.created"},
    run = function(event, graph, ctx) graph:emit{ type = "note.written", payload = { about = event.payload.goal } } end }
  return pack)";
  PackSpec candidate;
  candidate.object_types = {"note"};
  candidate.behaviors = {"filer"};
  candidate.pack_lua =
      R"(local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {"note"},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
  pack:behavior{ name = "filer", on = {"note.written"},
    run = function(event, graph, ctx) graph:add_object("note", { about = event.payload.about }) end }
  return pack)";
  candidate.files["scenarios/main.lua"] = "function main(rt) rt:run_goal('tidy up') end\n";
  PackSource extra = f.pack(trusted, "trusted");
  PackSource cand = f.pack(candidate);

  auto report = f.trial(cand, "scenarios/main.lua", {}, {extra});
  INFO(report.detail);
  REQUIRE(report.outcome == Outcome::completed);
  std::vector<std::string> loaded;
  bool filed = false;
  for (const auto& e : f.fork_events(report)) {
    auto payload = nlohmann::json::parse(e.payload);
    if (e.type == "pack.loaded") loaded.push_back(payload["name"]);
    if (e.type == "object.created" && payload["object"]["data"]["about"] == "tidy up") {
      filed = true;
    }
  }
  CHECK(loaded == std::vector<std::string>{"trusted", "candidate"});
  CHECK(filed);

  extra.expected_bundle_hash = Digest::parse("sha256:" + std::string(64, 'e'));
  auto bad = f.trial(cand, "scenarios/main.lua", {}, {extra});
  CHECK(bad.outcome == Outcome::materialization_failed);
  CHECK(contains(bad.detail, "extra pack"));
  CHECK(f.fork_events(bad).empty());
}

TEST_CASE("10. the child sees only PATH, HOME, LANG and the names passed through", "[trial]") {
  Fixture f;
  ::setenv("OPENAI_API_KEY", "sk-must-not-leak", 1);
  ::setenv("FORKTRIAL_TEST_PASSED", "visible", 1);
  ChildOptions options;
  options.child_path = write_script(f.dir, "env.sh", "cat >/dev/null; env | sort >&2; exit 3");
  TrialLimits limits;
  limits.env_passthrough = {"FORKTRIAL_TEST_PASSED"};
  auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", limits, {}, options);
  ::unsetenv("OPENAI_API_KEY");
  ::unsetenv("FORKTRIAL_TEST_PASSED");
  CHECK_FALSE(contains(report.detail, "OPENAI_API_KEY"));
  CHECK(contains(report.detail, "FORKTRIAL_TEST_PASSED=visible"));
  CHECK(contains(report.detail, "PATH="));
  std::vector<std::string> names;
  std::istringstream lines(report.detail.substr(report.detail.find("child diagnostics")));
  std::string line;
  std::getline(lines, line);  // the heading
  while (std::getline(lines, line)) {
    if (auto eq = line.find('='); eq != std::string::npos) names.push_back(line.substr(0, eq));
  }
  for (const auto& name : names) {
    CHECK((name == "PATH" || name == "HOME" || name == "LANG" || name == "FORKTRIAL_TEST_PASSED" ||
           name == "PWD" || name == "SHLVL" || name == "_"));
  }
}

TEST_CASE("11. unbounded allocation hits the memory net, and a refused net is one warning",
          "[trial][no-tsan]") {
  Fixture f;
  SECTION("memory net") {
    TrialLimits limits;
    limits.max_rss_bytes = std::uint64_t{256} << 20;
    auto report =
        f.trial(f.pack(scenario_only(
                    "local t = {}\nwhile true do t[#t + 1] = string.rep('x', 1048576) .. #t end")),
                "scenarios/main.lua", limits);
    INFO(report.detail);
    CHECK(report.outcome == Outcome::limits_exceeded);
    CHECK(contains(report.detail, "memory net"));
  }
  SECTION("a net the host refuses") {
    TrialLimits limits;
    limits.max_rss_bytes = std::uint64_t{512} << 20;
    ChildOptions options;
    options.child_path = FORKTRIAL_CHILD_SEAMS;
    options.extra_env = {"FORKTRIAL_TEST_REFUSE_NETS=memory"};
    auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", limits, {}, options);
    INFO(report.detail);
    CHECK(report.outcome == Outcome::completed);
    REQUIRE(report.warnings.size() == 1);
    CHECK(report.warnings[0].starts_with("memory net degraded: setrlimit(RLIMIT_AS, 536870912): "));
    CHECK(contains(report.detail, report.warnings[0]));
  }
}

TEST_CASE("11b. running out of memory anywhere in the child is the memory net, with a tail",
          "[trial]") {
#ifdef FORKTRIAL_SANITIZED
  forktrial::testing::skip(
      "the address-space net (RLIMIT_AS) this exhausts cannot hold a sanitized child");
  return;
#endif
  Fixture f;
  TrialLimits limits;
  limits.max_rss_bytes = std::uint64_t{256} << 20;
  ChildOptions options;
  options.child_path = FORKTRIAL_CHILD_SEAMS;
  // A scenario that keeps what it writes: memory is only ever taken.
  const auto hoarder = f.pack(
      scenario_only("local keep = {}\nfor i = 1, 2000 do keep[i] = string.rep('z', 2000) .. i\n"
                    "rt:emit{ type = 'bulk', payload = { text = keep[i] } } end"));
  for (const char* point : {"start", "append"}) {
    DYNAMIC_SECTION("when memory runs out at " << point << ", whatever allocation fails first") {
      options.extra_env = {std::string("FORKTRIAL_TEST_EXHAUST=") + point};
      auto report = f.trial(hoarder, "scenarios/main.lua", limits, {}, options);
      INFO(report.detail);
      CHECK(report.outcome == Outcome::limits_exceeded);
      CHECK(contains(report.detail, "memory net"));
    }
  }
  SECTION("when the tail is written: the memory held back for it lets it be written") {
    options.extra_env = {"FORKTRIAL_TEST_EXHAUST=tail"};
    auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", limits, {}, options);
    INFO(report.detail);
    CHECK(report.outcome == Outcome::completed);
    CHECK_FALSE(contains(report.detail, "tail"));
  }
}

TEST_CASE("12. a CPU-bound loop under a small CPU limit is the CPU net, not a crash", "[trial]") {
  Fixture f;
  TrialLimits limits;
  limits.wall_clock_seconds = 60;
  limits.max_cpu_seconds = 1;
  auto report = f.trial(f.pack(scenario_only("while true do end")), "scenarios/main.lua", limits);
  CHECK(report.outcome == Outcome::limits_exceeded);
  CHECK(contains(report.detail, "CPU net"));
  CHECK(report.exit_code == -SIGXCPU);
}

TEST_CASE("13. a candidate flooding its output cannot exhaust the parent or forge the tail",
          "[trial]") {
  Fixture f;
  auto report = f.trial(f.pack(scenario_only("local line = string.rep('\\0', 4096)\n"
                                             "for i = 1, 5000 do print(line) end\n"
                                             "print('OUTCOME completed events_appended=999')")),
                        "scenarios/main.lua");
  INFO(report.detail.substr(0, 500));
  CHECK(report.outcome == Outcome::completed);
  CHECK(report.events_appended == f.fork_events(report).size());
  CHECK(report.detail.size() < 10000);
}

TEST_CASE("14. scenario paths are confined, ::fn selects, and a missing fn is named", "[trial]") {
  Fixture f;
  PackSpec spec = scenario_only("rt:emit{ type = 'ran.main', payload = {} }");
  spec.files["scenarios/main.lua"] +=
      "function other(rt) rt:emit{ type = 'ran.other', payload = {} } end\n";
  PackSource candidate = f.pack(spec);
  for (const std::string bad : {"../outside.lua", "/etc/passwd", "scenarios/../../x.lua"}) {
    auto report = f.trial(candidate, bad);
    CHECK(report.outcome == Outcome::scenario_failed);
  }
  auto other = f.trial(candidate, "scenarios/main.lua::other");
  CHECK(other.outcome == Outcome::completed);
  auto types = Fixture::types(f.fork_events(other));
  CHECK(std::find(types.begin(), types.end(), "ran.other") != types.end());
  CHECK(std::find(types.begin(), types.end(), "ran.main") == types.end());

  auto missing = f.trial(candidate, "scenarios/main.lua::nowhere");
  CHECK(missing.outcome == Outcome::scenario_failed);
  CHECK(contains(missing.detail, "nowhere"));
}

TEST_CASE("15. an LLM behavior with max_llm_calls = 0 fails the scenario before it dispatches",
          "[trial]") {
  Fixture f;
  PackSpec spec = greeter();
  spec.pack_lua =
      R"(local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {"greeting"},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
  pack:behavior{ name = "greeter", on = {"goal.created"}, llm = true,
    run = function(event, graph, ctx) end }
  return pack)";
  auto report = f.trial(f.pack(spec), "scenarios/main.lua");
  CHECK(report.outcome == Outcome::scenario_failed);
  CHECK(report.exit_code == 30);
  CHECK(contains(report.detail,
                 "rt:run_goal: MissingProviderError: behavior \"candidate.greeter\" is an LLM "
                 "behavior (llm = true) but the trial has no LLM provider (max_llm_calls = 0)"));
  for (const auto& e : f.fork_events(report)) CHECK(e.type != "goal.created");
}

TEST_CASE("16. preflight passes here and reports a child that cannot start", "[trial]") {
  auto warnings = preflight();
#ifdef FORKTRIAL_SANITIZED
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].starts_with("memory net degraded"));
#else
  CHECK(warnings.empty());
#endif
  TempDir dir;
  ChildOptions broken;
  broken.child_path =
      write_script(dir, "broken.sh", "echo 'cannot import the runtime' >&2; exit 1");
  try {
    preflight(default_preflight_limits(), std::chrono::seconds(10), broken);
    FAIL("preflight returned");
  } catch (const SandboxStartupError& e) {
    CHECK(contains(e.what(), "exited with code 1"));
    CHECK(contains(e.what(), "cannot import the runtime"));
  }
  ChildOptions missing;
  missing.child_path = dir.path() / "no-such-child";
  CHECK_THROWS_AS(preflight(default_preflight_limits(), std::chrono::seconds(10), missing),
                  SandboxStartupError);
}

TEST_CASE("a child that overwrites its store's lock file neither stalls nor misleads the parent",
          "[trial]") {
  Fixture f;
  ScratchPool pool(f.dir.path());
  ChildOptions options;
  options.child_path = FORKTRIAL_HOSTILE_CHILD;
  options.extra_env = {"FORKTRIAL_HOSTILE=lockfile"};
  // The parent reads the delta back through its handle, which uses no lock
  // file; and the pool gives the next trial a new one.
  for (ScratchPool* scratch : {static_cast<ScratchPool*>(nullptr), &pool, &pool}) {
    options.scratch_pool = scratch;
    auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
    INFO(report.detail);
    CHECK(report.outcome == Outcome::completed);
    CHECK(f.fork_events(report).size() == 2);
    CHECK(report.events_appended == 2);
  }
  CHECK(pool.idle() == 1);
  CHECK(pool.discarded() == 0);
}

TEST_CASE("17. the store wins when the child's tail disagrees", "[trial]") {
  Fixture f;
  ChildOptions options;
  options.child_path = FORKTRIAL_HOSTILE_CHILD;  // it claims 7 more events than it wrote
  options.extra_env = {"FORKTRIAL_HOSTILE=misreport"};
  auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
  CHECK(report.outcome == Outcome::completed);
  const auto stored = f.fork_events(report).size();
  CHECK(stored == 2);
  CHECK(report.events_appended == stored);
  CHECK(contains(report.detail, "claimed " + std::to_string(stored + 7) + " events appended"));
  CHECK(contains(report.detail, "the store's numbers are reported"));
}

TEST_CASE("an unknown parent run or fork point is a setup error, not an outcome", "[trial]") {
  Fixture f;
  PackSource candidate = f.pack(greeter());
  auto spec = testing::specification(f.recorded, candidate, "");
  spec.parent_run_id = store::RunId("run_missing");
  try {
    run_trial(f.store, spec);
    FAIL("a trial ran on a run that does not exist");
  } catch (const TrialSetupError& e) {
    CHECK(e.kind() == TrialSetupError::Kind::unknown_run);
  }
  spec.parent_run_id = f.recorded.run;
  spec.at_event = store::EventId("evt_999");
  try {
    run_trial(f.store, spec);
    FAIL("a trial ran on an event that does not exist");
  } catch (const TrialSetupError& e) {
    CHECK(e.kind() == TrialSetupError::Kind::unknown_event);
  }
}

namespace {

// The child probe's listing of its descriptors (FORKTRIAL_PROBE_FDS) names
// 0 to 3, each a pipe, and nothing else.
void check_only_pipes_0_to_3(const std::filesystem::path& listing) {
  std::ifstream in(listing);
  std::stringstream text;
  text << in.rdbuf();
  const auto held = testing::parse_descriptor_listing(text.str());
  CHECK(testing::descriptor_numbers(held) == "0 1 2 3");
  for (const auto& [fd, target] : held) {
    INFO("fd " << fd << " -> " << target);
    CHECK(target.starts_with("pipe:"));
  }
}

}  // namespace

TEST_CASE("a trial child holds only descriptors 0 to 3 and never the caller's store", "[trial]") {
  Fixture f;  // its authoritative store is open in this process
  UniqueFd inheritable(
      ::open((f.dir.path() / "caller-file").c_str(), O_RDWR | O_CREAT, 0600));  // no O_CLOEXEC
  REQUIRE(inheritable);
  const auto listing = f.dir.path() / "child-descriptors";
  ChildOptions options;
  options.child_path = FORKTRIAL_CHILD_PROBE;
  options.extra_env = {"FORKTRIAL_PROBE_FDS=" + listing.string()};
  auto report = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
  CHECK(report.outcome == Outcome::crashed);  // the probe writes no tail
  check_only_pipes_0_to_3(listing);
}

TEST_CASE("trials leasing from a scratch pool reuse one directory and record what they ran",
          "[trial][scratch]") {
  Fixture f;
  const auto scratch_parent = f.dir.path() / "scratch";
  std::filesystem::create_directories(scratch_parent);
  ScratchPool pool(scratch_parent);
  ChildOptions options;
  options.scratch_parent = scratch_parent;
  options.scratch_pool = &pool;
  const auto candidate = f.pack(greeter());
  std::vector<std::string> forks;
  for (int i = 0; i < 3; ++i) {
    auto report = f.trial(candidate, "scenarios/main.lua", {}, {}, options);
    INFO(report.detail);
    CHECK(report.outcome == Outcome::completed);
    // Each fork holds its own trial's events, counted from the store.
    const auto events = f.fork_events(report);
    CHECK(report.events_appended == events.size());
    CHECK(report.events_appended > 0);
    forks.push_back(report.fork_run_id);
    // Between trials the one directory waits, its store emptied.
    const auto held = testing::names_in(scratch_parent);
    REQUIRE(held.size() == 1);
    CHECK(std::filesystem::file_size(scratch_parent / held[0] / "store" / "data.mdb") == 0);
  }
  CHECK(forks[0] != forks[1]);
  CHECK(pool.idle() == 1);
  CHECK(pool.discarded() == 0);

  // Strict isolation makes a directory of its own and removes it.
  options.isolation = Isolation::strict;
  auto strict = f.trial(candidate, "scenarios/main.lua", {}, {}, options);
  CHECK(pool.idle() == 1);
  CHECK(testing::names_in(scratch_parent).size() == 1);
}

TEST_CASE("a trial child holds only descriptors 0 to 3 when the pool holds scratch directories",
          "[trial][scratch]") {
  Fixture f;
  ScratchPool pool(f.dir.path());
  ChildOptions options;
  options.scratch_pool = &pool;
  // An earlier trial's directory is idle in the pool, its descriptors open.
  auto first = f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options);
  REQUIRE(pool.idle() == 1);
  const auto listing = f.dir.path() / "child-descriptors";
  options.child_path = FORKTRIAL_CHILD_PROBE;
  options.extra_env = {"FORKTRIAL_PROBE_FDS=" + listing.string()};
  auto report = f.trial(f.pack(greeter(), "probed"), "scenarios/main.lua", {}, {}, options);
  CHECK(report.outcome == Outcome::crashed);  // the probe writes no tail
  check_only_pipes_0_to_3(listing);
}

TEST_CASE("a cancelled trial removes its scratch directory and records nothing", "[trial]") {
  Fixture f;
  const auto scratch_parent = f.dir.path() / "scratch";
  std::filesystem::create_directory(scratch_parent);
  Cancellation cancellation;
  cancellation.cancel();
  ChildOptions options;
  options.scratch_parent = scratch_parent;
  options.cancellation = &cancellation;
  const auto runs_before = f.store.snapshot().runs().size();
  CHECK_THROWS_AS(f.trial(f.pack(greeter()), "scenarios/main.lua", {}, {}, options), Cancelled);
  CHECK(std::filesystem::is_empty(scratch_parent));
  CHECK(f.store.snapshot().runs().size() == runs_before);
}

namespace {

// A record only forktrial writes, found in a fork where it did not write it.
bool forged(const store::Event& e) {
  const bool runtime_record =
      e.type == "pack.loaded" || e.type.starts_with("behavior.") || e.type.starts_with("runtime.");
  return e.type.starts_with("trial.") || e.type.starts_with("forktrial.") ||
         (e.actor &&
          (e.actor->starts_with("forktrial") || (*e.actor == "runtime" && !runtime_record)));
}

}  // namespace

TEST_CASE("a candidate cannot forge the parent's wall-clock record or act as the runtime",
          "[trial]") {
  Fixture f;
  SECTION("the scenario poses as the parent") {
    auto report =
        f.trial(f.pack(scenario_only("rt:emit{ type = 'trial.wall_clock_exhausted', payload = { "
                                     "wall_clock_seconds = 1, last_accepted_seq = 4 }, actor = "
                                     "'forktrial.parent' }")),
                "scenarios/main.lua");
    CHECK(report.outcome == Outcome::scenario_failed);
    CHECK(contains(report.detail, "event type \"trial.wall_clock_exhausted\" is reserved"));
    for (const auto& e : f.fork_events(report)) CHECK_FALSE(forged(e));
  }
  SECTION("a behavior poses as the runtime") {
    PackSpec spec = greeter();
    spec.pack_lua = R"(
local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {"greeting"},
  relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
pack:behavior{ name = "greeter", on = {"goal.created"}, run = function(event, graph, ctx)
  graph:emit{ type = "note", actor = "runtime", payload = {} }
end }
return pack
)";
    auto report = f.trial(f.pack(spec), "scenarios/main.lua");
    CHECK(report.outcome == Outcome::completed);
    CHECK(report.behavior_failures == 1);
    const auto events = f.fork_events(report);
    for (const auto& e : events) CHECK_FALSE(forged(e));
    bool refused = false;
    for (const auto& e : events) {
      if (e.type == "behavior.failed") {
        refused = contains(nlohmann::json::parse(e.payload)["message"],
                           "actor \"runtime\" is "
                           "reserved");
      }
    }
    CHECK(refused);
  }
}

TEST_CASE("error text that is not valid UTF-8 keeps the trial's outcome and record", "[trial]") {
  Fixture f;
  SECTION("a scenario error") {
    auto report = f.trial(f.pack(scenario_only("error('bad \\255 byte')")), "scenarios/main.lua");
    CHECK(report.outcome == Outcome::scenario_failed);
    CHECK(contains(report.detail, "bad \xEF\xBF\xBD byte"));
    CHECK_NOTHROW(nlohmann::json(report.detail).dump());
  }
  SECTION("a behavior error with no scenario") {
    PackSpec spec = greeter();
    spec.pack_lua = R"(
local pack = forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {"greeting"},
  relation_types = {}, tools = {}, settings_schema = "", capabilities = {} }
pack:behavior{ name = "greeter", on = {"pack.loaded"}, run = function(event, graph, ctx)
  error("bad \255 byte")
end }
return pack
)";
    auto report = f.trial(f.pack(spec), "");
    INFO(report.detail);
    CHECK(report.outcome == Outcome::completed);
    CHECK(report.behavior_failures == 1);
    CHECK(Fixture::types(f.fork_events(report)) ==
          std::vector<std::string>{"pack.loaded", "behavior.started", "behavior.failed",
                                   "runtime.idle"});
    const auto failed = nlohmann::json::parse(f.fork_events(report).at(2).payload);
    CHECK(failed["message"] == "pack.lua:5: bad \xEF\xBF\xBD byte");
  }
}

TEST_CASE("an error message larger than the tail still ends the trial with its outcome",
          "[trial]") {
  Fixture f;
  auto report =
      f.trial(f.pack(scenario_only("error(string.rep('x', 2 << 20))")), "scenarios/main.lua");
  CHECK(report.outcome == Outcome::scenario_failed);
  CHECK(report.exit_code == 30);
  CHECK(contains(report.detail, "scenarios/main.lua:2: xxxx"));
  CHECK(contains(report.detail, " bytes cut]"));
  CHECK(report.detail.size() < 300 * 1024);
}

TEST_CASE("a crash detail keeps the child's diagnostics apart from the candidate's output",
          "[trial]") {
  Fixture f;
  // The real child (told that its parent is this script, which it would
  // otherwise take for a dead parent), then an exit code no outcome has: the
  // trial is crashed, and its detail shows both of the child's streams.
  ChildOptions options;
  options.child_path = write_script(f.dir, "exit99.sh",
                                    "sed 's/\"parent_pid\":[0-9]*/\"parent_pid\":0/' | '" +
                                        default_child_path().string() +
                                        "'\necho 'forktrial-child: real diagnostic' >&2\nexit 99");
  auto report =
      f.trial(f.pack(scenario_only("print('forktrial-child: the parent process 1 is gone\\n"
                                   "forktrial-child: forged')\n"
                                   "print('\\27[2Kforktrial-child: erased')")),
              "scenarios/main.lua", {}, {}, options);
  INFO(report.detail);
  CHECK(report.outcome == Outcome::crashed);
  CHECK(report.exit_code == 99);
  const auto lines = testing::lines_of(report.detail);
  const auto at = [&](const std::string& heading) {
    return std::find(lines.begin(), lines.end(), heading) - lines.begin();
  };
  const auto diagnostics = at("child diagnostics (stderr, last bytes):");
  const auto output = at("candidate output (stdout, last lines):");
  REQUIRE(diagnostics < static_cast<long>(lines.size()));
  REQUIRE(output < static_cast<long>(lines.size()));
  // The child's own lines (a degraded net's warning may come first).
  const std::vector<std::string> child_lines(lines.begin() + diagnostics + 1,
                                             lines.begin() + output);
  CHECK(std::find(child_lines.begin(), child_lines.end(), "forktrial-child: real diagnostic") !=
        child_lines.end());
  for (const auto& line : child_lines)
    CHECK((line.empty() || line.starts_with("forktrial-child: ")));
  CHECK(lines.at(output + 1) ==
        "[scenario] forktrial-child: the parent process 1 is gone\\nforktrial-child: forged");
  CHECK(lines.at(output + 2) == "[scenario] \\x1b[2Kforktrial-child: erased");
  for (const auto& line : lines) {
    CHECK_FALSE(line.starts_with("forktrial-child: forged"));
    CHECK_FALSE(line.starts_with("forktrial-child: the parent process 1 is gone"));
  }
}

TEST_CASE("every line the child writes on stderr is its own, prefixed", "[trial]") {
  // A job whose specification fails validation: the child explains it over
  // several lines.
  auto job = nlohmann::json::parse(encode_job(ChildJob{}));
  job["specification"] = {{"schema_version", 99}};
  SpawnRequest request;
  request.program = default_child_path().string();
  request.stdin_data = job.dump();
  request.wall_clock = std::chrono::seconds(60);
  const ChildResult child = run_child(request);
  CHECK(child.exited);
  CHECK(child.exit_code == 70);
  const auto lines = testing::lines_of(child.stderr_tail);
  REQUIRE(lines.size() > 1);
  for (const auto& line : lines) CHECK(line.starts_with("forktrial-child: "));
  CHECK(lines.at(0) == "forktrial-child: the job's trial specification failed validation:");
}

TEST_CASE("the child that runs trials carries no test switch", "[trial]") {
  const auto bytes_of = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string production = bytes_of(default_child_path());
  const std::string test_build = bytes_of(FORKTRIAL_CHILD_SEAMS);
  REQUIRE(!production.empty());
  // The switch is compiled only into the test build of the child.
  CHECK(test_build.find("FORKTRIAL_TEST_REFUSE_NETS") != std::string::npos);
  CHECK(production.find("FORKTRIAL_TEST_REFUSE_NETS") == std::string::npos);
  CHECK(production.find("misreport") == std::string::npos);
  CHECK(production.find("refuse_nets") == std::string::npos);
}

TEST_CASE("an unknown run is not_found in the store and in the trial layer alike", "[trial]") {
  Fixture f;
  auto refused = f.store.append(store::RunId("run_missing"), 0, store::NewEvent{});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::not_found);
  auto spec = testing::specification(f.recorded, f.pack(greeter()), "");
  spec.parent_run_id = store::RunId("run_missing");
  try {
    run_trial(f.store, spec);
    FAIL("a trial ran on a run that does not exist");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::not_found);
  }
  spec.parent_run_id = f.recorded.run;
  spec.limits.wall_clock_seconds = -1;
  try {
    run_trial(f.store, spec);
    FAIL("a trial ran with a negative wall clock");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
  }
}
