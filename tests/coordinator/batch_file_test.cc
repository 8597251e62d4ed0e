// Batch files: the TOML matrix and JSON Lines, expanded into pinned trial
// specifications, with every problem reported at once.
#include "coordinator/batch_file.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pack/bundle_hash.h"
#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

using namespace forktrial;
using namespace forktrial::coordinator;
using forktrial::testing::PackSpec;
using forktrial::testing::TempDir;
using forktrial::testing::write_pack;
using Texts = std::vector<std::string>;

namespace {

// A candidate pack with one scenario file, written under `dir/relative`;
// returns its bundle pin.
std::string candidate(const TempDir& dir, std::string_view relative,
                      std::vector<std::string> scenarios = {"scenarios/replay.lua"}) {
  PackSpec spec;
  spec.name = "candidate";
  for (const auto& file : scenarios) spec.files[file] = "function main(rt) end\n";
  return write_pack(dir.path() / std::string(relative), spec);
}

// A pack with no code of its own, named `name`; returns its bundle pin.
std::string plain_pack(const TempDir& dir, std::string_view relative, std::string name) {
  PackSpec spec;
  spec.name = std::move(name);
  return write_pack(dir.path() / std::string(relative), spec);
}

std::string normal(const std::filesystem::path& path) {
  return path.lexically_normal().string();
}

Batch read_ok(const std::filesystem::path& file) {
  auto batch = read_batch_file(file);
  if (!batch) {
    for (const auto& problem : batch.error().list) UNSCOPED_INFO(problem);
  }
  REQUIRE(batch.has_value());
  return std::move(*batch);
}

Texts read_problems(const std::filesystem::path& file) {
  auto batch = read_batch_file(file);
  REQUIRE_FALSE(batch.has_value());
  return batch.error().list;
}

bool has(const Texts& problems, std::string_view text) {
  for (const auto& problem : problems) {
    if (problem.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a batch file with a character outside ASCII where a key starts is refused",
          "[coordinator][batch]") {
  // toml++ reached code it marks unreachable for U+00D7 there.
  auto batch = parse_batch("name = \"n\"\n[limits]\nwall_cl\xC3\x97 = 1\n", "/nowhere/b.toml");
  REQUIRE_FALSE(batch.has_value());
  REQUIRE(batch.error().list.size() == 1);
  CHECK(batch.error().list[0] ==
        "line 3, column 8: not valid TOML: byte 0xC3 is not ASCII, outside a string or a "
        "comment; TOML does not allow it (see docs/batch-file.md)");
}

TEST_CASE("a batch file with a line break inside a table array header is refused",
          "[coordinator][batch]") {
  // toml++ asserted a key could not start there, aborting a build without NDEBUG.
  auto batch = parse_batch("name = \"n\"\n[[\ncandidates]]\n", "/nowhere/b.toml");
  REQUIRE_FALSE(batch.has_value());
  REQUIRE(batch.error().list.size() == 1);
  CHECK(batch.error().list[0].starts_with("line 2, column "));
  CHECK(batch.error().list[0].find("not valid TOML") != std::string::npos);
}

TEST_CASE("every batch file the fuzzer found a crash with is refused", "[coordinator][batch]") {
  // fuzz/regressions/batch: text toml++ 3.3 met with unreachable code or a
  // failed assertion (pack/toml.h); the sanitizer pass would report either.
  const auto dir = std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "fuzz/regressions/batch";
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(entry.path().filename().string());
    CHECK_FALSE(parse_batch(text, "/nowhere/batch").has_value());
    ++inputs;
  }
  CHECK(inputs >= 3);
}

TEST_CASE("a batch matrix expands candidate-major into every combination", "[coordinator][batch]") {
  TempDir dir;
  const std::string echo = candidate(dir, "packs/chat_echo", {"s/a.lua", "s/b.lua"});
  const std::string other = candidate(dir, "packs/other", {"s/a.lua", "s/b.lua"});
  const auto file = dir.write("nightly.toml", R"(
name = "nightly"
run = "run_chat"
at = ["evt_006", "evt_010"]
repeat = 2
priority = 7
[limits]
max_events = 500
[[candidates]]
pack = "packs/chat_echo"
[[candidates]]
pack = "packs/other"
[[scenarios]]
file = "s/a.lua"
[[scenarios]]
file = "s/b.lua::other_fn"
)");
  const Batch batch = read_ok(file);
  CHECK(batch.name == "nightly");
  CHECK(batch.priority == 7);
  REQUIRE(batch.trials.size() == 2 * 2 * 2 * 2);
  std::vector<std::string> labels;
  for (const auto& trial : batch.trials) labels.push_back(trial.label);
  CHECK(labels == std::vector<std::string>{
                      "nightly chat_echo s/a.lua@evt_006 #1",
                      "nightly chat_echo s/a.lua@evt_006 #2",
                      "nightly chat_echo s/a.lua@evt_010 #1",
                      "nightly chat_echo s/a.lua@evt_010 #2",
                      "nightly chat_echo s/b.lua::other_fn@evt_006 #1",
                      "nightly chat_echo s/b.lua::other_fn@evt_006 #2",
                      "nightly chat_echo s/b.lua::other_fn@evt_010 #1",
                      "nightly chat_echo s/b.lua::other_fn@evt_010 #2",
                      "nightly other s/a.lua@evt_006 #1",
                      "nightly other s/a.lua@evt_006 #2",
                      "nightly other s/a.lua@evt_010 #1",
                      "nightly other s/a.lua@evt_010 #2",
                      "nightly other s/b.lua::other_fn@evt_006 #1",
                      "nightly other s/b.lua::other_fn@evt_006 #2",
                      "nightly other s/b.lua::other_fn@evt_010 #1",
                      "nightly other s/b.lua::other_fn@evt_010 #2",
                  });
  const auto& first = batch.trials.front();
  CHECK(first.parent_run_id.str() == "run_chat");
  CHECK(first.at_event.str() == "evt_006");
  CHECK(first.scenario == "s/a.lua");
  CHECK(first.candidate ==
        sandbox::PackSource{normal(dir.path() / "packs/chat_echo"), Digest::parse(echo), true});
  CHECK(first.extra_packs.empty());
  CHECK(first.limits.max_events == 500);
  CHECK(first.limits.wall_clock_seconds == sandbox::TrialLimits{}.wall_clock_seconds);
  const auto& last = batch.trials.back();
  CHECK(last.scenario == "s/b.lua::other_fn");
  CHECK(last.at_event.str() == "evt_010");
  CHECK(last.candidate.expected_bundle_hash == Digest::parse(other));
  CHECK(batch.packs ==
        std::vector<BatchPack>{{normal(dir.path() / "packs/chat_echo"), *Digest::parse(echo)},
                               {normal(dir.path() / "packs/other"), *Digest::parse(other)}});
}

TEST_CASE("a batch without scenarios runs each candidate until idle, named after its file",
          "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "p/echo");
  const auto file = dir.write("weekly.toml", R"(
run = "run_chat"
at = "evt_003"
[[candidates]]
pack = "p/echo"
name = "first"
)");
  const Batch batch = read_ok(file);
  CHECK(batch.name == "weekly");
  CHECK(batch.priority == 0);
  REQUIRE(batch.trials.size() == 1);
  CHECK(batch.trials[0].scenario.empty());
  CHECK(batch.trials[0].label == "weekly first idle@evt_003 #1");
}

TEST_CASE("pack paths resolve against the batch file's directory, not the current one",
          "[coordinator][batch]") {
  TempDir dir;
  const std::string pin = candidate(dir, "packs/echo");
  const auto file = dir.write("batches/deep/b.toml", R"(
run = "r"
at = ["e"]
[[candidates]]
pack = "../../packs/echo/"
[[candidates]]
pack = ")" + (dir.path() / "packs" / "echo").string() + R"("
name = "again"
)");
  const Batch batch = read_ok(file);
  REQUIRE(batch.trials.size() == 2);
  const std::string root = normal(dir.path() / "packs/echo");
  CHECK(batch.trials[0].candidate.root_dir == root);
  CHECK(batch.trials[1].candidate.root_dir == root);
  // The one directory is listed, and hashed, once.
  CHECK(batch.packs == std::vector<BatchPack>{{root, *Digest::parse(pin)}});
}

TEST_CASE("an expect pin that matches is kept, one that does not names both hashes",
          "[coordinator][batch]") {
  TempDir dir;
  const std::string pin = candidate(dir, "packs/echo");
  const std::string wrong = "sha256:" + std::string(64, 'a');
  const auto good = dir.write("good.toml", R"(
run = "r"
at = "e"
[[candidates]]
pack = "packs/echo"
expect = ")" + pin + R"("
)");
  CHECK(read_ok(good).trials.at(0).candidate.expected_bundle_hash == Digest::parse(pin));

  const auto bad = dir.write("bad.toml", R"(
run = "r"
at = "e"
[[candidates]]
pack = "packs/echo"
[[candidates]]
pack = "packs/echo"
name = "pinned"
expect = ")" + wrong + R"("
)");
  const Texts problems = read_problems(bad);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].starts_with("candidates[1].expect (line 9): bundle hash mismatch for " +
                                normal(dir.path() / "packs/echo") + ": pinned " + wrong +
                                " but the directory hashes to " + pin));
  // The library says what is wrong; what to do is the command line's.
  CHECK(problems[0].find("`forktrial ") == std::string::npos);
}

TEST_CASE("extra packs load before the candidate, as directories or pinned",
          "[coordinator][batch]") {
  TempDir dir;
  const std::string echo = candidate(dir, "packs/echo");
  const std::string base = plain_pack(dir, "packs/base", "base");
  const std::string tools = plain_pack(dir, "packs/tools", "tools");
  const auto file = dir.write("b.toml", R"(
run = "r"
at = "e"
[[candidates]]
pack = "packs/echo"
extra_packs = ["packs/base", {pack = "packs/tools", expect = ")" +
                                            tools + R"("}]
[[candidates]]
pack = "packs/tools"
name = "tools_as_candidate"
extra_packs = ["packs/base"]
)");
  const Batch batch = read_ok(file);
  REQUIRE(batch.trials.size() == 2);
  CHECK(batch.trials[0].extra_packs ==
        std::vector<sandbox::PackSource>{
            {normal(dir.path() / "packs/base"), Digest::parse(base), true},
            {normal(dir.path() / "packs/tools"), Digest::parse(tools), true}});
  CHECK(batch.trials[1].extra_packs ==
        std::vector<sandbox::PackSource>{
            {normal(dir.path() / "packs/base"), Digest::parse(base), true}});
  CHECK(batch.packs ==
        std::vector<BatchPack>{{normal(dir.path() / "packs/echo"), *Digest::parse(echo)},
                               {normal(dir.path() / "packs/base"), *Digest::parse(base)},
                               {normal(dir.path() / "packs/tools"), *Digest::parse(tools)}});
}

TEST_CASE("limits accept human units and plain numbers", "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "p");
  const auto read_limits = [&](const std::string& limits) {
    const auto file = dir.write("b.toml",
                                "run = \"r\"\nat = \"e\"\n[[candidates]]\npack = \"p\"\n"
                                "[limits]\n" +
                                    limits);
    return read_ok(file).trials.at(0).limits;
  };
  auto limits = read_limits(
      "wall_clock = \"10s\"\nmax_rss = \"256M\"\nmax_cpu = \"2m\"\nmax_appended_bytes = "
      "\"1G\"\nmax_events = 1000\nmax_llm_calls = 3\nmax_appended_events = 9\n"
      "env_passthrough = [\"TZ\"]\n");
  CHECK(limits.wall_clock_seconds == 10);
  CHECK(limits.max_rss_bytes == std::uint64_t{256} << 20);
  CHECK(limits.max_cpu_seconds == 120);
  CHECK(limits.max_appended_bytes == std::uint64_t{1} << 30);
  CHECK(limits.max_events == 1000);
  CHECK(limits.max_llm_calls == 3);
  CHECK(limits.max_appended_events == 9);
  CHECK(limits.env_passthrough == std::vector<std::string>{"TZ"});

  limits = read_limits("wall_clock = \"500ms\"\nmax_rss = \"1G\"\n");
  CHECK(limits.wall_clock_seconds == 0.5);
  CHECK(limits.max_rss_bytes == std::uint64_t{1} << 30);

  limits = read_limits(
      "wall_clock_seconds = 2.5\nmax_rss_bytes = 134217728\nmax_cpu_seconds = 30\n"
      "max_appended_bytes = 4096\n");
  CHECK(limits.wall_clock_seconds == 2.5);
  CHECK(limits.max_rss_bytes == 134217728);
  CHECK(limits.max_cpu_seconds == 30);
  CHECK(limits.max_appended_bytes == 4096);

  // A number under the human name is seconds or bytes; 0 disables the net.
  limits = read_limits("wall_clock = 10\nmax_rss = 0\n");
  CHECK(limits.wall_clock_seconds == 10);
  CHECK(limits.max_rss_bytes == 0);
}

TEST_CASE("every problem in a batch file is reported at once", "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "packs/echo");
  const auto file = dir.write("broken.toml", R"(name = "nightly"
run = 7
at = ["evt_006", "", "evt_006", 3]
repeat = 0
priority = "high"
colour = "red"
[limits]
wall_clock = "10 parsecs"
max_rss = "1M"
max_events = "many"
max_cpu = "500ms"
speed = 3
[[candidates]]
pack = "packs/missing"
[[candidates]]
pack = "packs/echo"
expect = "sha256:042ff759"
extra_packs = [7, {pack = "packs/also_missing", pin = "x"}]
[[candidates]]
expect = "sha256:0000"
[[scenarios]]
file = "replay.py"
[[scenarios]]
file = "../outside.lua"
[[scenarios]]
file = "scenarios/absent.lua"
)");
  const Texts problems = read_problems(file);
  for (const auto& problem : problems) UNSCOPED_INFO(problem);
  const std::vector<std::string> expected = {
      "colour (line 6): unknown key; the keys here are name, run, at, repeat, priority, limits, "
      "candidates, scenarios, keep_forks, keep_forks_after (see docs/batch-file.md)",
      "run (line 2): must be a string, got an integer",
      "at[1] (line 3): fork point is empty; give an event id of the parent run, such as "
      "\"evt_006\"",
      "at[2] (line 3): fork point \"evt_006\" is also at[0]; list each once (use repeat for more "
      "trials at it)",
      "at[3] (line 3): must be an event id (a string), got an integer",
      "repeat (line 4): 0 is outside 1 to 1000000; repeat is how many times each trial runs, at "
      "least 1",
      "priority (line 5): must be an integer, got a string",
      "limits.wall_clock (line 8): \"10 parsecs\" has the unit \" parsecs\"; give seconds, or a "
      "number with ms, s, m or h (e.g. 10s, 500ms, 2m)",
      "limits.max_cpu (line 11): \"500ms\" is not a whole, non-negative number of seconds (the "
      "CPU net counts whole seconds, e.g. 30s or 2m)",
      "limits.speed (line 12): unknown limit; the limits are wall_clock, wall_clock_seconds, "
      "max_rss, max_rss_bytes, max_events, max_llm_calls, max_cpu, max_cpu_seconds, "
      "max_appended_events, max_appended_bytes, env_passthrough (see docs/batch-file.md)",
      "limits.max_events (line 10): must be a non-negative integer, got a string",
      "candidates[1].expect (line 17): malformed bundle pin \"sha256:042ff759\"",
      "candidates[1].extra_packs[0] (line 18): must be a directory or {pack = \"dir\", expect = "
      "\"sha256:...\"}, got an integer",
      "candidates[1].extra_packs[1].pin (line 18): unknown key; the keys here are pack, expect",
      "candidates[2].pack (line 19): missing; add pack = \"<pack directory>\"",
      "candidates[2].expect (line 20): malformed bundle pin \"sha256:0000\"",
      // A Python scenario is an activegraph pack's: this Lua candidate cannot run it.
      "scenarios[0].file (line 22): in candidates[1] (echo): scenario \"replay.py\" does not "
      "name a .lua file; write \"path.lua\" or \"path.lua::fn\" (the candidate is a Lua pack)",
      "scenarios[1].file (line 24): scenario path \"../outside.lua\" must be a relative path "
      "inside the candidate",
      "candidates[0].pack (line 14): no pack directory at " + normal(dir.path() / "packs/missing") +
          " (",
      "candidates[1].extra_packs[1].pack (line 18): no pack directory at " +
          normal(dir.path() / "packs/also_missing"),
      "scenarios[2].file (line 26): in candidates[1] (echo): scenario path "
      "\"scenarios/absent.lua\" is not a file of the pack at " +
          normal(dir.path() / "packs/echo"),
  };
  for (const auto& text : expected) {
    INFO(text);
    CHECK(has(problems, text));
  }
  CHECK(problems.size() == expected.size());
}

TEST_CASE("limits out of range are refused under the key that was written",
          "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "p");
  const auto file = dir.write("b.toml", R"(run = "r"
at = "e"
[[candidates]]
pack = "p"
[limits]
max_rss = "1M"
wall_clock_seconds = 1e-9
env_passthrough = ["OK", "BAD=1"]
max_cpu = "30s"
max_cpu_seconds = 30
)");
  const Texts problems = read_problems(file);
  CHECK(problems == Texts{"limits.max_cpu_seconds (line 10): the same limit as "
                          "limits.max_cpu; give it once, under one name",
                          "limits.env_passthrough[1] (line 8): must be an environment "
                          "variable name (letters, digits, '_'), got \"BAD=1\""});
  const auto ranges = dir.write("c.toml", R"(run = "r"
at = "e"
[[candidates]]
pack = "p"
[limits]
max_rss = "2T"
wall_clock_seconds = 1e-9
)");
  CHECK(read_problems(ranges) ==
        Texts{"limits.wall_clock_seconds (line 7): 1e-09 s is below the 1 ms the wall-clock "
              "net can measure; give at least 0.001 (0 disables the net)",
              "limits.max_rss (line 6): 2199023255552 bytes is more than the 1099511627776 "
              "(1 TiB) a trial may be given; 0 or null disables the net"});
  // A cap activegraph takes, and forktrial's Lua child cannot run under.
  const auto small = dir.write("d.toml", R"(run = "r"
at = "e"
[[candidates]]
pack = "p"
[limits]
max_rss = "32M"
)");
  CHECK(read_problems(small) ==
        Texts{"in candidates[0] (p): limits.max_rss_bytes: 33554432 bytes is below the 67108864 "
              "(64 MiB) forktrial's Lua child runs in; give at least that (0 or null disables "
              "the net; an activegraph pack takes a smaller cap)"});
}

TEST_CASE("a missing run, fork point or candidate list is named with what to add",
          "[coordinator][batch]") {
  TempDir dir;
  const auto file = dir.write("empty.toml", "# nothing yet\n");
  CHECK(read_problems(file) ==
        Texts{"run: missing; add run = \"<parent run id>\"",
              "at: missing; add at = [\"evt_...\"], the parent's events to fork at",
              "candidates: missing; add a [[candidates]] table with pack = \"<pack "
              "directory>\" for each candidate"});
  const auto empty =
      dir.write("empty_lists.toml", "run = \"r\"\nat = []\ncandidates = []\nscenarios = []\n");
  const Texts problems = read_problems(empty);
  CHECK(problems.size() == 3);
  CHECK(has(problems, "at (line 2): is empty, so the matrix has no trials"));
  CHECK(has(problems, "candidates (line 3): is empty"));
  CHECK(has(problems, "scenarios (line 4): is empty, so the matrix has no trials"));
}

TEST_CASE("a TOML syntax error names its line and column", "[coordinator][batch]") {
  TempDir dir;
  const auto file = dir.write("b.toml", "run = \"r\"\nat = [\"e\"\n[[candidates]]\n");
  const Texts problems = read_problems(file);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].starts_with("line 3, column "));
  CHECK(problems[0].find("not valid TOML") != std::string::npos);
}

TEST_CASE("two candidates whose labels would collide are refused", "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "a/echo");
  candidate(dir, "b/echo");
  const auto file = dir.write("b.toml", R"(run = "r"
at = "e"
[[candidates]]
pack = "a/echo"
[[candidates]]
pack = "b/echo"
)");
  CHECK(read_problems(file) ==
        Texts{"candidates[1] (line 5): its name \"echo\" is also the name of candidates[0], "
              "and trial labels must tell them apart; give one of them name = \"...\""});
}

TEST_CASE("each trial names its candidate as the batch file does", "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "a/echo");
  candidate(dir, "b/echo");
  const auto file = dir.write("b.toml", R"(run = "r"
at = ["e1", "e2"]
[[candidates]]
pack = "a/echo"
[[candidates]]
pack = "b/echo"
name = "echo-v2"
)");
  const Batch batch = read_ok(file);
  CHECK(batch.candidates == std::vector<std::string>{"echo", "echo", "echo-v2", "echo-v2"});
  REQUIRE(batch.trials.size() == batch.candidates.size());
  CHECK(batch.trials[2].candidate.root_dir.ends_with("/b/echo"));
}

TEST_CASE("a matrix over the trial cap is refused before any pack is read",
          "[coordinator][batch]") {
  TempDir dir;
  const auto file = dir.write("huge.toml", R"(run = "r"
at = ["e1", "e2", "e3"]
repeat = 1000000
[[candidates]]
pack = "not/read"
)");
  CHECK(read_problems(file) ==
        Texts{"the matrix of 1 candidates x 1 scenarios x 3 fork points x 1000000 repeats is "
              "more than the 1000000 trials a batch may hold; split it into several batches"});
}

TEST_CASE("a 100,000-trial matrix expands with each pack read once", "[coordinator][batch]") {
  TempDir dir;
  std::vector<std::string> scenarios;
  for (int s = 0; s < 10; ++s) scenarios.push_back("s/" + std::to_string(s) + ".lua");
  std::string text = "run = \"r\"\nrepeat = 10\nat = [";
  for (int a = 0; a < 100; ++a)
    text += (a ? ", " : "") + std::string("\"evt_") + std::to_string(a) + "\"";
  text += "]\n";
  for (int c = 0; c < 10; ++c) {
    candidate(dir, "packs/c" + std::to_string(c), scenarios);
    text += "[[candidates]]\npack = \"packs/c" + std::to_string(c) + "\"\n";
  }
  for (const auto& scenario : scenarios) text += "[[scenarios]]\nfile = \"" + scenario + "\"\n";
  const Batch batch = read_ok(dir.write("big.toml", text));
  REQUIRE(batch.trials.size() == 100'000);
  CHECK(batch.packs.size() == 10);
  CHECK(batch.trials.front().label == "big c0 s/0.lua@evt_0 #1");
  CHECK(batch.trials[10].label == "big c0 s/0.lua@evt_1 #1");
  CHECK(batch.trials.back().label == "big c9 s/9.lua@evt_99 #10");
  CHECK(batch.trials.back().candidate.expected_bundle_hash == batch.packs.back().bundle_hash);
}

TEST_CASE("JSON Lines batches read forktrial's and activegraph's specifications",
          "[coordinator][batch]") {
  TempDir dir;
  const std::string echo = candidate(dir, "packs/echo");
  const std::string base = plain_pack(dir, "packs/base", "base");
  const auto file = dir.write(
      "specs/nightly.jsonl",
      R"({"schema_version":1,"parent_run_id":"run_chat","at_event":"evt_006","label":"mine","candidate":{"root_dir":"../packs/echo","expected_bundle_hash":")" +
          echo + R"("},"scenario":"scenarios/replay.lua","limits":{"max_events":10}}

{"at_event":"evt_010","extra_packs":[{"expected_bundle_hash":"","manifest_required":true,"root_dir":"../packs/base"}],"label":"theirs","limits":{"env_passthrough":[],"max_events":null,"max_llm_calls":null,"max_rss_bytes":null,"wall_clock_seconds":120.0},"pack_source":{"expected_bundle_hash":"","manifest_required":false,"root_dir":")" +
          (dir.path() / "packs/echo").string() +
          R"("},"parent_run_id":"run_chat","scenario":"","schema_version":1,"store_path":"/data/ag.db"}
)");
  const Batch batch = read_ok(file);
  CHECK(batch.name == "nightly");
  REQUIRE(batch.trials.size() == 2);
  CHECK(batch.trials[0].label == "mine");
  CHECK(batch.trials[0].candidate ==
        sandbox::PackSource{normal(dir.path() / "packs/echo"), Digest::parse(echo), true});
  CHECK(batch.trials[0].limits.max_events == 10);
  CHECK(batch.trials[1].label == "theirs");
  CHECK(batch.trials[1].at_event.str() == "evt_010");
  // An unpinned pack is pinned to what was read.
  CHECK(batch.trials[1].candidate ==
        sandbox::PackSource{normal(dir.path() / "packs/echo"), Digest::parse(echo), false});
  CHECK(batch.trials[1].extra_packs ==
        std::vector<sandbox::PackSource>{
            {normal(dir.path() / "packs/base"), Digest::parse(base), true}});
  CHECK(batch.packs ==
        std::vector<BatchPack>{{normal(dir.path() / "packs/echo"), *Digest::parse(echo)},
                               {normal(dir.path() / "packs/base"), *Digest::parse(base)}});
  CHECK(batch.candidates == std::vector<std::string>{"echo", "echo"});

  // Without the extension, the content says JSON Lines.
  const auto plain = dir.write("specs/nightly.txt", forktrial::testing::read_file(file));
  CHECK(detect_batch_format(plain, forktrial::testing::read_file(plain)) ==
        BatchFormat::json_lines);
  CHECK(read_ok(plain).trials.size() == 2);
}

TEST_CASE("every bad line of a JSON Lines batch is reported with its number",
          "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "packs/echo");
  const std::string wrong = "sha256:" + std::string(64, 'c');
  const auto file = dir.write(
      "b.jsonl",
      R"({"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":{"root_dir":"packs/echo"}}
not json
{"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":{"root_dir":"packs/echo"},"limits":{"max_events":"many"},"colour":1}
{"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":{"root_dir":"packs/none"}}
{"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":{"root_dir":"packs/echo","expected_bundle_hash":")" +
          wrong + R"("}}
{"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":{"root_dir":"packs/echo"},"scenario":"nope.lua"}
)");
  const Texts problems = read_problems(file);
  for (const auto& problem : problems) UNSCOPED_INFO(problem);
  const std::vector<std::string> expected = {
      "line 2: trial specification: not valid JSON",
      "line 3: limits.max_events: must be a non-negative integer, got a string",
      "line 3: colour: unknown field",
      "line 4: candidate.root_dir: no pack directory at " + normal(dir.path() / "packs/none"),
      "line 5: candidate.expected_bundle_hash: bundle hash mismatch for " +
          normal(dir.path() / "packs/echo") + ": pinned " + wrong,
      "line 6: scenario: scenario path \"nope.lua\" is not a file of the pack",
  };
  for (const auto& text : expected) {
    INFO(text);
    CHECK(has(problems, text));
  }
  CHECK(problems.size() == expected.size());
}

TEST_CASE("a batch file that cannot be read is named", "[coordinator][batch]") {
  TempDir dir;
  const auto missing = dir.path() / "none.toml";
  CHECK(read_problems(missing) ==
        Texts{missing.string() + ": cannot open the batch file: No such file or directory"});
}

TEST_CASE("a candidate directory that is not a pack is refused before anything of it is read out",
          "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "packs/good");
  // A home directory named by mistake: a key, and no manifest.toml.
  dir.write("home/.ssh/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n");
  dir.write("home/notes.lua", "return {}\n");
  const auto toml = dir.write("batch.toml", R"(
run = "run_chat"
at = ["evt_006"]
[[candidates]]
pack = "packs/good"
[[candidates]]
pack = "home"
)");
  const Texts problems = read_problems(toml);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Catch::Contains("candidates[1].pack") &&
                              Catch::Contains(normal(dir.path() / "home") +
                                              " is not a pack a trial can run, so nothing of it "
                                              "is archived or uploaded:") &&
                              Catch::Contains("manifest.toml"));
  // JSON Lines: once per directory, however many trials name it.
  std::string lines;
  for (int i = 0; i < 3; ++i) {
    lines += R"({"schema_version":1,"parent_run_id":"run_chat","at_event":"evt_006","label":"t)" +
             std::to_string(i) + R"(","candidate":{"root_dir":"home"}})" + "\n";
  }
  const Texts jsonl = read_problems(dir.write("batch.jsonl", lines));
  REQUIRE(jsonl.size() == 1);
  CHECK_THAT(jsonl[0], Catch::StartsWith("line 1: ") && Catch::Contains("is not a pack"));
  // A spec asking for no manifest check still names a pack: one with a
  // manifest.toml is taken as it says, one without none is refused.
  const auto raw = [&](const std::string& root) {
    return dir.write("raw.jsonl",
                     R"({"schema_version":1,"parent_run_id":"run_chat","at_event":"evt_006",)"
                     R"("label":"raw","candidate":{"root_dir":")" +
                         root + R"(","manifest_required":false}})" + "\n");
  };
  dir.write("loose/manifest.toml", "not even TOML [");
  CHECK(read_ok(raw("loose")).trials.size() == 1);
  const Texts unmarked = read_problems(raw("home"));
  REQUIRE(unmarked.size() == 1);
  CHECK_THAT(unmarked[0], Catch::Contains("holds no manifest.toml, so it is not a pack"));
}

TEST_CASE("a batch may set what its finished job keeps of its forks", "[coordinator][batch]") {
  TempDir dir;
  candidate(dir, "p/echo");
  const std::string matrix = R"(
run = "run_chat"
at = "evt_003"
[[candidates]]
pack = "p/echo"
)";
  CHECK_FALSE(read_ok(dir.write("plain.toml", matrix)).retention.has_value());
  const Batch kept = read_ok(
      dir.write("kept.toml", "keep_forks = \"failures\"\nkeep_forks_after = \"7d\"\n" + matrix));
  REQUIRE(kept.retention.has_value());
  CHECK(kept.retention->keep == KeepForks::failures);
  CHECK(kept.retention->after == std::chrono::days(7));
  const Batch now = read_ok(dir.write("now.toml", "keep_forks = \"none\"\n" + matrix));
  CHECK(now.retention == RetentionPolicy{KeepForks::none, Duration(0)});

  const Texts problems = read_problems(
      dir.write("bad.toml", "keep_forks = \"some\"\nkeep_forks_after = \"soon\"\n" + matrix));
  CHECK(has(problems, "keep_forks (line 1): \"some\" is not a retention; give all, failures"));
  CHECK(has(problems, "keep_forks_after (line 2): \"soon\" is not an age"));
  CHECK(has(read_problems(dir.write("alone.toml", "keep_forks_after = \"1d\"\n" + matrix)),
            "keep_forks_after (line 1): is given without keep_forks"));
}
