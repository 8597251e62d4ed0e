#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "import/activegraph_sqlite.h"
#include "tests/store/store_test_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

using testing::ids_of;
using Strings = std::vector<std::string>;

void exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "?";
    sqlite3_free(error);
    FAIL(sql << ": " << message);
  }
}

void exec_on(const std::filesystem::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  exec(db, sql);
  sqlite3_close(db);
}

struct Layout {
  std::string runs_columns =
      "run_id TEXT PRIMARY KEY, label TEXT, created_at TEXT, parent_run_id TEXT, "
      "forked_at_event_id TEXT";
  std::string events_columns =
      "run_id TEXT, seq INTEGER, id TEXT, type TEXT, payload TEXT, actor TEXT, frame_id TEXT, "
      "caused_by TEXT, timestamp TEXT";
  bool fork_copies_prefix = false;
};

// An activegraph store: run_root with four events, run_fork forked at its
// second event with two events of its own.
std::filesystem::path make_activegraph_db(const std::filesystem::path& path,
                                          const Layout& layout = {}) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  exec(db, "CREATE TABLE runs (" + layout.runs_columns + ")");
  exec(db, "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  exec(db, "INSERT INTO meta VALUES ('schema_version', '1')");
  exec(db, "CREATE TABLE events (" + layout.events_columns + ")");
  // The fork row comes first, so the importer has to order parents first.
  exec(db,
       "INSERT INTO runs VALUES ('run_fork', 'retry', '2026-01-03T00:00:00+00:00', 'run_root', "
       "'evt_002')");
  exec(db,
       "INSERT INTO runs VALUES ('run_root', 'session', '2026-01-02T00:00:00+00:00', NULL, "
       "NULL)");
  auto insert = [&](const char* run, int seq, const char* id, const char* type, const char* payload,
                    const char* actor, const char* cause) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "INSERT INTO events VALUES (?,?,?,?,?,?,NULL,?,?)", -1, &stmt,
                               nullptr) == SQLITE_OK);
    sqlite3_bind_text(stmt, 1, run, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 2, seq);
    sqlite3_bind_text(stmt, 3, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(stmt, 4, type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(stmt, 5, payload, -1, SQLITE_TRANSIENT);
    if (actor != nullptr) sqlite3_bind_text(stmt, 6, actor, -1, SQLITE_TRANSIENT);
    if (cause != nullptr) sqlite3_bind_text(stmt, 7, cause, -1, SQLITE_TRANSIENT);
    std::string ts = "2026-01-02T00:00:0" + std::to_string(seq) + ".000000+00:00";
    sqlite3_bind_text(stmt, 8, ts.c_str(), -1, SQLITE_TRANSIENT);
    REQUIRE(sqlite3_step(stmt) == SQLITE_DONE);
    sqlite3_finalize(stmt);
  };
  // Inserted out of seq order: the importer orders by seq.
  insert("run_root", 3, "evt_003", "object.created", R"({"type": "greeting"})", "greeter",
         "evt_002");
  insert("run_root", 1, "evt_001", "goal.created", R"({"goal": "hi"})", "user", nullptr);
  insert("run_root", 2, "evt_002", "note", "{}", nullptr, "evt_001");
  insert("run_root", 4, "evt_004", "runtime.idle", "{}", nullptr, nullptr);
  int seq = 1;
  if (layout.fork_copies_prefix) {
    insert("run_fork", seq++, "evt_001", "goal.created", R"({"goal": "hi"})", "user", nullptr);
    insert("run_fork", seq++, "evt_002", "note", "{}", nullptr, "evt_001");
  }
  insert("run_fork", seq++, "evt_003", "behavior.failed", R"({"behavior": "greeter"})", nullptr,
         "evt_002");
  insert("run_fork", seq++, "evt_004", "runtime.idle", "{}", nullptr, nullptr);
  sqlite3_close(db);
  return path;
}

void check_imported(EventStore& store) {
  auto snap = store.snapshot();
  auto runs = snap.runs();
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].id.str() == "run_root");
  CHECK(runs[1].id.str() == "run_fork");
  RunInfo root = *snap.run(RunId("run_root"));
  RunInfo fork = *snap.run(RunId("run_fork"));
  CHECK(root.label == "session");
  CHECK(root.created_at == "2026-01-02T00:00:00+00:00");
  CHECK_FALSE(root.fork_of.has_value());
  CHECK(fork.fork_of == ForkPoint{RunId("run_root"), EventId("evt_002"), 2});
  CHECK(ids_of(snap.history(root)) == Strings{"evt_001", "evt_002", "evt_003", "evt_004"});
  CHECK(ids_of(snap.history(fork)) == Strings{"evt_001", "evt_002", "evt_003", "evt_004"});
  auto fork_events = snap.history(fork);
  CHECK(fork_events[2].type == "behavior.failed");
  CHECK(fork_events[2].payload == R"({"behavior": "greeter"})");  // as recorded
  CHECK(fork_events[0].actor == std::optional<std::string>("user"));
  CHECK_FALSE(fork_events[1].actor.has_value());
  CHECK(fork_events[1].caused_by == std::optional<EventId>(EventId("evt_001")));
  CHECK(snap.history(root)[2].type == "object.created");
  CHECK(ids_of(snap.events_of_type(fork, "behavior.failed", 2)) == Strings{"evt_003"});
  CHECK(snap.events_of_type(root, "behavior.failed").empty());
}

TEST_CASE("an activegraph SQLite store with a fork imports with ids and lineage",
          "[import][sqlite]") {
  forktrial::testing::TempDir dir;
  auto db = make_activegraph_db(dir.path() / "ag.db");
  EventStore store(dir.path() / "s");
  auto imported = import::import_activegraph_sqlite(store, db);
  REQUIRE(imported);
  CHECK(imported->size() == 2);
  check_imported(store);
  // Importing it again is refused: the run ids exist.
  auto again = import::import_activegraph_sqlite(store, db);
  REQUIRE_FALSE(again);
  CHECK(again.error().kind == Refused::run_exists);
}

TEST_CASE("a fork whose rows repeat its inherited prefix imports the same history",
          "[import][sqlite]") {
  forktrial::testing::TempDir dir;
  Layout layout;
  layout.fork_copies_prefix = true;
  auto db = make_activegraph_db(dir.path() / "ag.db", layout);
  EventStore store(dir.path() / "s");
  REQUIRE(import::import_activegraph_sqlite(store, db));
  check_imported(store);
}

TEST_CASE("optional run columns may be absent", "[import][sqlite]") {
  forktrial::testing::TempDir dir;
  auto path = dir.path() / "min.db";
  exec_on(path,
          "CREATE TABLE runs (run_id TEXT);"
          "CREATE TABLE meta (key TEXT, value TEXT);"
          "INSERT INTO meta VALUES ('schema_version', '1');"
          "CREATE TABLE events (run_id TEXT, seq INT, id TEXT, type TEXT, payload TEXT, "
          "timestamp TEXT);"
          "INSERT INTO runs VALUES ('r1');"
          "INSERT INTO events VALUES ('r1', 1, 'e1', 't', '{}', '2026-01-01T00:00:00Z')");
  EventStore store(dir.path() / "s");
  auto imported = import::import_activegraph_sqlite(store, path);
  REQUIRE(imported);
  auto snap = store.snapshot();
  auto history = snap.history(*snap.run(RunId("r1")));
  REQUIRE(history.size() == 1);
  CHECK_FALSE(history[0].actor.has_value());
  CHECK_FALSE(history[0].caused_by.has_value());
}

TEST_CASE("malformed activegraph stores are refused naming the problem, importing nothing",
          "[import][sqlite]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s");
  auto refused_with = [&](const std::filesystem::path& db, const std::string& text) {
    auto result = import::import_activegraph_sqlite(store, db);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == Refused::invalid_input);
    CHECK_THAT(result.error().message, Catch::Contains(text));
    CHECK(store.snapshot().runs().empty());
  };
  SECTION("missing required column") {
    Layout layout;
    layout.events_columns =
        "run_id TEXT, seq INTEGER, id TEXT, kind TEXT, payload TEXT, actor TEXT, frame_id TEXT, "
        "caused_by TEXT, timestamp TEXT";
    refused_with(make_activegraph_db(dir.path() / "a.db", layout),
                 "table \"events\" has no column \"type\"");
  }
  SECTION("missing table") {
    exec_on(dir.path() / "b.db", "CREATE TABLE runs (run_id TEXT)");
    refused_with(dir.path() / "b.db", "has no table \"events\"");
  }
  SECTION("fork point not in the parent") {
    auto path = make_activegraph_db(dir.path() / "c.db");
    exec_on(path, "UPDATE runs SET forked_at_event_id = 'evt_404' WHERE run_id = 'run_fork'");
    refused_with(path, "forked at event evt_404");
  }
  SECTION("payload that is not an object, in the second run") {
    auto path = make_activegraph_db(dir.path() / "d.db");
    exec_on(path, "UPDATE events SET payload = '[1]' WHERE run_id = 'run_fork' AND id = 'evt_004'");
    refused_with(path, "run run_fork, event at seq 2 (evt_004): payload is a JSON array");
  }
  SECTION("not a database") {
    forktrial::testing::TempDir files;
    refused_with(files.write("e.db", "definitely not sqlite, just text padding it out"), "e.db");
  }
}

TEST_CASE("hostile text in an activegraph store is refused naming the run, row and column",
          "[import][sqlite]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s");
  auto refused_with = [&](const std::string& sql, const std::string& where,
                          const std::string& why) {
    auto path = make_activegraph_db(dir.path() / "hostile.db");
    exec_on(path, sql);
    auto result = import::import_activegraph_sqlite(store, path);
    std::filesystem::remove(path);
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == Refused::invalid_input);
    CHECK_THAT(result.error().message, Catch::Contains(where) && Catch::Contains(why));
    CHECK(store.snapshot().runs().empty());
  };
  SECTION("a type with an escape sequence") {
    refused_with(
        "UPDATE events SET type = char(27) || '[2J' WHERE id = 'evt_003' AND run_id = "
        "'run_root'",
        "run run_root, event at seq 3 (evt_003): field \"type\"",
        "contains the control character U+001B at offset 0");
  }
  SECTION("an actor that is not valid UTF-8") {
    refused_with("UPDATE events SET actor = CAST(X'6361FF' AS TEXT) WHERE id = 'evt_001'",
                 "run run_root, event at seq 1 (evt_001): field \"actor\"",
                 "is not valid UTF-8 (byte 0xFF at offset 2)");
  }
  SECTION("an event id with a newline") {
    refused_with(
        "UPDATE events SET id = 'evt' || char(10) || '4' WHERE id = 'evt_004' AND "
        "run_id = 'run_fork'",
        "run run_fork, event at seq 2: field \"id\"",
        "contains the control character U+000A at offset 3");
  }
  SECTION("a frame id beyond the length bound") {
    refused_with(
        "UPDATE events SET frame_id = replace(hex(zeroblob(1000)), '0', 'f') WHERE id = "
        "'evt_002'",
        "run run_root, event at seq 2 (evt_002): field \"frame_id\"",
        "is 2000 bytes long; the limit is 1024");
  }
  SECTION("a label with a control character") {
    refused_with("UPDATE runs SET label = 'ok' || char(13) || 'forged' WHERE run_id = 'run_root'",
                 "run run_root: label", "contains the control character U+000D at offset 2");
  }
  SECTION("a creation time with a control character") {
    refused_with("UPDATE runs SET created_at = char(27) || '[31m' WHERE run_id = 'run_fork'",
                 "run run_fork: created_at", "contains the control character U+001B");
  }
  SECTION("a run id that is not valid UTF-8") {
    refused_with(
        "UPDATE runs SET run_id = CAST(X'72756EFF' AS TEXT) WHERE run_id = 'run_fork';"
        "UPDATE events SET run_id = CAST(X'72756EFF' AS TEXT) WHERE run_id = 'run_fork'",
        "run id \"run\\xff\"", "is not valid UTF-8 (byte 0xFF at offset 3)");
  }
}

}  // namespace
}  // namespace forktrial::store
