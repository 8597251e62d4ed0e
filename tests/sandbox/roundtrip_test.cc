// The whole way through, as a user goes: a store written the way activegraph
// writes it (tests/import/activegraph_store.py) is imported, from SQLite and
// from export-trace JSON Lines; a candidate is trialed at fork points after
// objects, relations and patches exist; each fork's export keeps the
// inherited lines byte for byte, and an independent re-implementation of
// activegraph's projector (tests/runtime/ag_replayer.py) replays it to the
// state `forktrial run graph` projects, object by object.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/ag_replay.h"
#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

using forktrial::testing::ag_replayed;
using forktrial::testing::lines_of;
using forktrial::testing::PackSpec;
using forktrial::testing::require_same_state;
using forktrial::testing::run_command;
using forktrial::testing::TempDir;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kGenerator = FORKTRIAL_SOURCE_DIR "/tests/import/activegraph_store.py";
const std::string kExamples = FORKTRIAL_SOURCE_DIR "/examples";

forktrial::testing::CommandResult cli(std::vector<std::string> args) {
  auto result = forktrial::testing::run_forktrial(std::move(args));
  INFO("forktrial stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return result;
}

// A candidate that reviews the notes and claims when asked: a review object
// covering each, each of them patched, and a proposal on the review applied
// (replace) and another rejected.
PackSpec reviewer() {
  PackSpec spec;
  spec.name = "reviewer";
  spec.object_types = {"note", "claim", "review"};
  spec.relation_types = {"covers"};
  spec.behaviors = {"review"};
  spec.pack_lua = forktrial::testing::pack_header(spec) + R"(
pack:behavior{ name = "review", on = {"review.requested"}, run = function(event, graph, ctx)
  local review = graph:add_object("review", { round = event.payload.round })
  for _, o in ipairs(graph:objects()) do
    if o.type == "note" or o.type == "claim" then
      graph:add_relation(review, o.id, "covers", { weight = 1 })
      graph:patch_object(o.id, { reviewed = event.payload.round })
    end
  end
  graph:apply_patch(graph:propose_patch(review, "replace", { round = event.payload.round,
                                                             done = true }))
  graph:reject_patch(graph:propose_patch(review, "update", { redo = true }), "not needed")
end }
return pack
)";
  spec.files["scenarios/review.lua"] = R"(
function main(rt)
  rt:emit{ type = "review.requested", payload = { round = 1 } }
  rt:run_until_idle()
  rt:emit{ type = "review.requested", payload = { round = 2 } }
  rt:run_until_idle()
end
)";
  return spec;
}

// A store in `dir`, and the reviewer pack written beside it.
struct Store {
  std::string path;
  std::string pack;

  explicit Store(const TempDir& dir)
      : path((dir.path() / "store").string()),
        pack(forktrial::testing::write_pack(dir, "reviewer", reviewer()).string()) {}

  // Trials the reviewer on a fork of `run` at `at`; returns the fork's id.
  std::string trial(const std::string& run, const std::string& at) const {
    auto result = cli({"trial", "--store", path, "--run", run, "--at", at, "--pack", pack,
                       "--scenario", "scenarios/review.lua", "--json"});
    const auto report = nlohmann::json::parse(result.out);
    REQUIRE(report["outcome"] == "completed");
    REQUIRE(report["behavior_failures_after_fork"] == 0);
    return report["fork_run_id"];
  }

  std::string export_of(const std::string& run) const {
    return cli({"run", "export", run, "--store", path}).out;
  }

  ordered_json graph_of(const std::string& run) const {
    return ordered_json::parse(cli({"run", "graph", run, "--store", path, "--json"}).out);
  }
};

// The first `n` lines of `text`, each with its newline.
std::string first_lines(const std::string& text, std::size_t n) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    end = text.find('\n', end);
    REQUIRE(end != std::string::npos);
    ++end;
  }
  return text.substr(0, end);
}

// Trials at `at` (the `at_line`th event of `run`) and checks the fork end to
// end; returns the fork's projected state.
ordered_json check_fork(const TempDir& dir, const Store& store, const std::string& run,
                        const std::string& at, std::size_t at_line,
                        const std::string& recorded_export) {
  INFO("fork of " << run << " at " << at);
  const std::string fork = store.trial(run, at);
  const std::string exported = store.export_of(fork);
  // The inherited lines are the recorded ones, byte for byte.
  REQUIRE(first_lines(exported, at_line) == first_lines(recorded_export, at_line));
  const ordered_json ours = store.graph_of(fork);
  require_same_state(ours, ag_replayed(dir, exported));
  return ours;
}

std::size_t count_of(const ordered_json& state, const std::string& kind,
                     const std::string& status = "") {
  std::size_t n = 0;
  for (const auto& item : state[kind]) {
    if (status.empty() || item["status"] == status) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE(
    "an activegraph SQLite store imports, trials at any fork point, and replays in "
    "activegraph's projector",
    "[trial][cli][activegraph]") {
  TempDir dir;
  const fs::path db = dir.path() / "activegraph.db";
  const auto generated =
      run_command({"python3", kGenerator, db.string(), "--export-dir", dir.path().string()});
  INFO("generator stderr: " << generated.err);
  REQUIRE(generated.exit_code == 0);
  std::map<std::string, std::string> runs;
  for (const std::string& line : lines_of(generated.out)) {
    runs[line.substr(0, line.find(' '))] = line.substr(line.find(' ') + 1);
  }
  Store store(dir);
  cli({"run", "import-sqlite", db.string(), "--store", store.path});

  std::ifstream root_file(dir.path() / "root.jsonl", std::ios::binary);
  std::stringstream root_export;
  root_export << root_file.rdbuf();
  // The imported runs export as export-trace printed them.
  REQUIRE(store.export_of(runs["root"]) == root_export.str());

  // Root: evt_003 (two objects), evt_004 (a relation), evt_007 (an applied
  // patch), evt_009 (the end, after runtime.idle).
  const auto after_objects = check_fork(dir, store, runs["root"], "evt_003", 3, root_export.str());
  REQUIRE(count_of(after_objects, "objects") == 2 + 2);    // note#1, claim#2, two reviews
  REQUIRE(count_of(after_objects, "relations") == 2 + 2);  // each review covers both
  const auto after_relation = check_fork(dir, store, runs["root"], "evt_004", 4, root_export.str());
  REQUIRE(count_of(after_relation, "relations") == 1 + 2 + 2);
  const auto after_patch = check_fork(dir, store, runs["root"], "evt_007", 7, root_export.str());
  REQUIRE(after_patch["objects"][1]["data"] ==
          ordered_json::parse(R"({"text": "better", "reviewed": 2})"));
  REQUIRE(after_patch["objects"][1]["version"] == 4);  // the recorded patch, then two reviews
  // The recorded one, then per round two patch_object and one replace.
  REQUIRE(count_of(after_patch, "patches", "applied") == 1 + 2 * 3);
  REQUIRE(count_of(after_patch, "patches", "rejected") == 2);
  check_fork(dir, store, runs["root"], "evt_009", 9, root_export.str());

  // The recorded fork (at evt_004, with a note of its own and a failure).
  std::ifstream fork_file(dir.path() / "fork.jsonl", std::ios::binary);
  std::stringstream fork_export;
  fork_export << fork_file.rdbuf();
  const auto on_fork = check_fork(dir, store, runs["fork"], "evt_006", 6, fork_export.str());
  REQUIRE(on_fork["objects"][2]["id"] == "note#3");
  REQUIRE(on_fork["objects"][3]["id"] == "review#4");  // one counter over all types
}

TEST_CASE("a JSON Lines export and a recorded fork of it import, trial and replay",
          "[trial][cli][activegraph]") {
  TempDir dir;
  Store store(dir);
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string chat = read(kExamples + "/runs/chat.jsonl");
  const std::string whatif = read(kExamples + "/runs/chat-whatif.jsonl");
  cli({"run", "import", kExamples + "/runs/chat.jsonl", "--store", store.path, "--id", "chat"});
  cli({"run", "import", kExamples + "/runs/chat-whatif.jsonl", "--store", store.path, "--id",
       "whatif", "--fork-of", "chat", "--at", "evt_009"});
  REQUIRE(store.export_of("chat") == chat);
  REQUIRE(store.export_of("whatif") == whatif);
  // The recorded runs themselves project as activegraph projects them.
  require_same_state(store.graph_of("chat"), ag_replayed(dir, chat));
  require_same_state(store.graph_of("whatif"), ag_replayed(dir, whatif));

  // The reviewer declares no thread or reply: it reviews nothing of the chat
  // but adds its own reviews; the point is the ids and the replay.
  const auto at_end = check_fork(dir, store, "chat", "evt_031", 31, chat);
  REQUIRE(at_end["objects"][3]["id"] == "review#4");
  REQUIRE(at_end["patches"][2]["id"] == "patch_003");  // after patch_001, patch_002
  check_fork(dir, store, "whatif", "evt_016", 16, whatif);
}

TEST_CASE("a recorded fork whose prefix differs from its parent is refused, naming the event",
          "[trial][cli][activegraph]") {
  TempDir dir;
  const std::string store = (dir.path() / "store").string();
  cli({"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id", "chat"});
  std::ifstream in(kExamples + "/runs/chat-whatif.jsonl", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string changed = text.str();
  const auto at = changed.find("hello there");
  REQUIRE(at != std::string::npos);
  changed.replace(at, 11, "hello THERE");
  const auto file = dir.write("changed.jsonl", changed);
  auto refused = forktrial::testing::run_forktrial(
      {"run", "import", file.string(), "--store", store, "--fork-of", "chat", "--at", "evt_009"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("event evt_003 (line 3) differs from the parent's evt_003") !=
        std::string::npos);
  // Nothing was imported.
  CHECK(cli({"run", "ls", "--store", store, "--json", "--all"}).out.find("changed.jsonl") ==
        std::string::npos);
  // A fork point the parent does not have.
  auto unknown = forktrial::testing::run_forktrial(
      {"run", "import", file.string(), "--store", store, "--fork-of", "chat", "--at", "evt_999"});
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.err.find("run chat has no event evt_999") != std::string::npos);
}
