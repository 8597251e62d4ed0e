// Import and export against stores written the way activegraph writes them:
// tests/import/activegraph_store.py builds each store (its schema, meta row,
// WAL mode, ULID run ids, serde's payload text, a fork with its copied
// prefix, a compacted run) and writes the bytes activegraph's
// `export-trace --format jsonl` prints for each run. forktrial must import
// those stores exactly and export those bytes exactly.
#include "tests/import/activegraph_fixture.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "import/activegraph_sqlite.h"
#include "import/jsonl.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

namespace fs = std::filesystem;
using forktrial::testing::run_command;
using forktrial::testing::run_forktrial;
using forktrial::testing::TempDir;
using testing::ActivegraphFixture;
using testing::exec_sql;

std::string export_of(EventStore& store, const std::string& run_id) {
  auto snap = store.snapshot();
  auto run = snap.run(RunId(run_id));
  REQUIRE(run);
  std::string out;
  snap.for_each_event(*run, 1, [&](const EventView& e) {
    out += import::jsonl::to_line(e) + "\n";
    return true;
  });
  return out;
}

Refusal refusal_of(const fs::path& db, EventStore& store) {
  auto result = import::import_activegraph_sqlite(store, db);
  REQUIRE_FALSE(result);
  CHECK(result.error().kind == Refused::invalid_input);
  CHECK(store.snapshot().runs().empty());
  return result.error();
}

TEST_CASE("a real activegraph store imports with its ULID run ids, goal, frame and fork",
          "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture;
  const std::string root_id = fixture.runs["root"];
  const std::string fork_id = fixture.runs["fork"];
  CHECK(root_id.size() == 26);
  EventStore store(fixture.dir.path() / "store");
  auto imported = import::import_activegraph_sqlite(store, fixture.db);
  INFO((imported ? std::string() : imported.error().message));
  REQUIRE(imported);
  REQUIRE(imported->size() == 2);
  auto snap = store.snapshot();
  RunInfo root = *snap.run(RunId(root_id));
  RunInfo fork = *snap.run(RunId(fork_id));
  CHECK(root.label == "recorded session");
  CHECK(root.created_at == "2026-03-01T10:00:00.000000+00:00");
  CHECK(root.goal == std::optional<std::string>("summarize the café notes"));
  CHECK(root.frame_id == std::optional<std::string>("frame_001"));
  CHECK(fork.goal == root.goal);
  CHECK(fork.frame_id == root.frame_id);
  CHECK(fork.fork_of == ForkPoint{RunId(root_id), EventId("evt_004"), 4});
  // The fork's rows repeat the prefix; the store inherits it instead.
  CHECK(fork.head == 6);
  auto history = snap.history(fork);
  CHECK(history[4].id.str() == "evt_005");
  CHECK(history[4].type == "object.created");
}

TEST_CASE("imported payloads keep the bytes activegraph stored", "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture;
  EventStore store(fixture.dir.path() / "store");
  REQUIRE(import::import_activegraph_sqlite(store, fixture.db));
  auto snap = store.snapshot();
  const std::string root_id = fixture.runs["root"];
  auto history = snap.history(*snap.run(RunId(root_id)));
  const auto stored = fixture.stored_payloads(root_id);
  REQUIRE(history.size() == stored.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    INFO("event " << history[i].id.str());
    CHECK(history[i].payload == stored[i]);
  }
  // Insertion order, spaced separators, raw UTF-8 and every digit of an
  // integer wider than 64 bits.
  CHECK_THAT(history[5].payload,
             Catch::StartsWith(R"({"wide": 123456789012345678901234567890, )"
                               R"("negative": -18446744073709551617, "ratio": 0.1, )"
                               R"("exp": 1e+300, "text": "Zürich 東京 😀)"));
}

TEST_CASE("an imported store exports exactly what activegraph export-trace prints",
          "[import][sqlite][export][activegraph]") {
  ActivegraphFixture fixture;
  EventStore store(fixture.dir.path() / "store");
  REQUIRE(import::import_activegraph_sqlite(store, fixture.db));
  CHECK(export_of(store, fixture.runs["root"]) == fixture.export_trace("root"));
  // A fork's export holds its inherited prefix, as activegraph's copied rows do.
  CHECK(export_of(store, fixture.runs["fork"]) == fixture.export_trace("fork"));
}

TEST_CASE("export-trace JSON Lines import and export back to the same bytes",
          "[import][jsonl][export][activegraph]") {
  ActivegraphFixture fixture;
  EventStore store(fixture.dir.path() / "store");
  for (const std::string role : {"root", "fork"}) {
    INFO(role);
    const std::string trace = fixture.export_trace(role);
    std::istringstream in(trace);
    auto events = import::jsonl::parse_events(in);
    REQUIRE(events);
    auto run = store.import_run(NewRun{.id = RunId("jsonl_" + role)}, *events);
    REQUIRE(run);
    CHECK(export_of(store, "jsonl_" + role) == trace);
  }
  // The payload is the line's own text: the wide integer kept, not a double.
  auto snap = store.snapshot();
  auto history = snap.history(*snap.run(RunId("jsonl_root")));
  CHECK_THAT(history[5].payload, Catch::Contains("123456789012345678901234567890") &&
                                     Catch::Contains(R"(\u6771\u4eac \ud83d\ude00)"));
}

TEST_CASE("the forktrial command imports a real store and exports export-trace's bytes",
          "[import][sqlite][cli][activegraph]") {
  ActivegraphFixture fixture;
  const std::string store = (fixture.dir.path() / "store").string();
  auto imported = run_forktrial({"run", "import-sqlite", fixture.db.string(), "--store", store});
  INFO(imported.err);
  REQUIRE(imported.exit_code == 0);
  auto show = run_forktrial({"run", "show", fixture.runs["fork"], "--store", store, "--json"});
  REQUIRE(show.exit_code == 0);
  auto shown = nlohmann::json::parse(show.out);
  CHECK(shown["goal"] == "summarize the café notes");
  CHECK(shown["frame_id"] == "frame_001");
  auto listed = run_forktrial({"run", "ls", "--store", store, "--json"});
  REQUIRE(listed.exit_code == 0);
  CHECK(nlohmann::json::parse(listed.out)[0]["goal"] == "summarize the café notes");
  auto text = run_forktrial({"run", "show", fixture.runs["root"], "--store", store});
  CHECK_THAT(text.out, Catch::Contains("goal       summarize the café notes") &&
                           Catch::Contains("frame      frame_001"));
  auto exported = run_forktrial({"run", "export", fixture.runs["fork"], "--store", store});
  REQUIRE(exported.exit_code == 0);
  CHECK(exported.out == fixture.export_trace("fork"));
}

TEST_CASE("a store of another schema_version is refused naming both versions",
          "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture({"--schema-version", "2"});
  EventStore store(fixture.dir.path() / "store");
  CHECK_THAT(refusal_of(fixture.db, store).message,
             Catch::Contains("activegraph schema_version \"2\" is not one forktrial reads (it "
                             "reads schema_version \"1\")"));
}

TEST_CASE("a compacted run is refused naming the run and its runtime.snapshot event",
          "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture({"--compacted"});
  EventStore store(fixture.dir.path() / "store");
  CHECK_THAT(refusal_of(fixture.db, store).message,
             Catch::Contains("run " + fixture.runs["compacted"] +
                             " is compacted: its event evt_003 (runtime.snapshot) stands for "
                             "the state of the events before it, and 2 of its events were moved "
                             "to the table events_archive"));
}

TEST_CASE("a retired run, all of it archived, is refused rather than imported empty",
          "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture;
  // activegraph's retire(): every row of the run moved to the archive.
  exec_sql(
      fixture.db,
      "INSERT INTO events_archive (seq, id, type, actor, payload, frame_id, caused_by, "
      "timestamp, run_id, archived_at) SELECT seq, id, type, actor, payload, frame_id, "
      "caused_by, timestamp, run_id, '2026-03-02T00:00:00+00:00' FROM events WHERE run_id = '" +
          fixture.runs["fork"] + "'; DELETE FROM events WHERE run_id = '" + fixture.runs["fork"] +
          "'");
  EventStore store(fixture.dir.path() / "store");
  CHECK_THAT(refusal_of(fixture.db, store).message,
             Catch::Contains("run " + fixture.runs["fork"] +
                             " is compacted: it has no runtime.snapshot event, and 6 of its "
                             "events were moved to the table events_archive"));
}

TEST_CASE("NaN in an activegraph store is refused naming the event and the value",
          "[import][sqlite][payload][activegraph]") {
  ActivegraphFixture fixture({"--nan"});
  EventStore store(fixture.dir.path() / "store");
  CHECK_THAT(refusal_of(fixture.db, store).message,
             Catch::Contains("run " + fixture.runs["root"] +
                             ", event at seq 8 (evt_008): payload holds the value NaN at "
                             "payload[\"score\"], which is not JSON"));
}

TEST_CASE("NaN and Infinity in export-trace JSON Lines are refused naming the event and value",
          "[import][jsonl][payload][activegraph]") {
  ActivegraphFixture fixture({"--nan"});
  std::istringstream in(fixture.export_trace("root"));
  auto events = import::jsonl::parse_events(in);
  REQUIRE_FALSE(events);
  CHECK(events.error().line == 8);
  CHECK_THAT(events.error().message,
             Catch::StartsWith("line 8: event evt_008: field \"payload\" holds the value NaN at "
                               "payload[\"score\"], which is not JSON"));
  std::istringstream infinity(
      R"({"id": "evt_001", "type": "m", "payload": {"a": [1, {"b": -Infinity}]}, )"
      R"("timestamp": "2026-03-01T10:00:01Z"})");
  auto refused = import::jsonl::parse_events(infinity);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message,
             Catch::StartsWith("line 1: event evt_001: field \"payload\" holds the value "
                               "-Infinity at payload[\"a\"][1][\"b\"]"));
}

TEST_CASE("a live store in WAL mode imports one committed state while a writer is open",
          "[import][sqlite][activegraph]") {
  ActivegraphFixture fixture;
  const std::string root = fixture.runs["root"];
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(fixture.db.c_str(), &raw) == SQLITE_OK);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> writer(raw, sqlite3_close);
  auto exec_writer = [&](const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error);
    INFO(sql << ": " << (error != nullptr ? error : ""));
    sqlite3_free(error);
    REQUIRE(rc == SQLITE_OK);
  };
  // A committed append that stays in the WAL, not checkpointed into the file.
  exec_writer("PRAGMA wal_autocheckpoint=0");
  exec_writer(
      "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
      "VALUES ('evt_010', 'note.added', 'user', '{\"text\": \"late\"}', NULL, NULL, "
      "'2026-03-01T10:01:00Z', '" +
      root + "')");
  REQUIRE(fs::file_size(fs::path(fixture.db.string() + "-wal")) > 0);
  // A writer in the middle of a transaction: none of it may be imported.
  exec_writer("BEGIN IMMEDIATE");
  exec_writer(
      "INSERT INTO runs (run_id, created_at) VALUES ('01KJMZZZZZZZZZZZZZZZZZZZZZ', "
      "'2026-03-01T12:00:00+00:00')");
  exec_writer(
      "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
      "VALUES ('evt_011', 'note.added', 'user', '{}', NULL, NULL, '2026-03-01T10:02:00Z', '" +
      root + "')");
  EventStore store(fixture.dir.path() / "store");
  auto imported = import::import_activegraph_sqlite(store, fixture.db);
  INFO((imported ? std::string() : imported.error().message));
  REQUIRE(imported);
  CHECK(imported->size() == 2);
  auto snap = store.snapshot();
  auto history = snap.history(*snap.run(RunId(root)));
  REQUIRE(history.size() == 10);
  CHECK(history.back().id.str() == "evt_010");
  CHECK(history.back().payload == R"({"text": "late"})");
  exec_writer("COMMIT");
}

}  // namespace
}  // namespace forktrial::store
