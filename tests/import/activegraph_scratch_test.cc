// The scratch store of activegraph's trial child (import/activegraph_scratch.h):
// written in activegraph's layout, byte for byte what activegraph writes for a
// fork, and read back trusting nothing the child could have shaped.
#include "import/activegraph_scratch.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "import/activegraph_sqlite.h"
#include "tests/import/activegraph_fixture.h"
#include "tests/support/temp_dir.h"

namespace forktrial::import {
namespace {

namespace fs = std::filesystem;
using store::EventStore;
using store::EventView;
using store::RunId;
using testing::ActivegraphFixture;
using testing::exec_sql;
using testing::TempDir;

// Every row of `table` of `db` as text, one line per row, in `order`.
std::vector<std::string> rows_of(const fs::path& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> conn(raw, sqlite3_close);
  sqlite3_stmt* stmt = nullptr;
  INFO(sql);
  REQUIRE(sqlite3_prepare_v2(raw, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  std::vector<std::string> rows;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    std::string row;
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      if (c > 0) row += " | ";
      if (sqlite3_column_type(stmt, c) == SQLITE_NULL) {
        row += "NULL";
      } else {
        row += std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, c)),
                           static_cast<std::size_t>(sqlite3_column_bytes(stmt, c)));
      }
    }
    rows.push_back(row);
  }
  sqlite3_finalize(stmt);
  return rows;
}

// The layout of a file: each table's columns and each index's columns.
std::vector<std::string> layout_of(const fs::path& db) {
  std::vector<std::string> out;
  for (const auto& table :
       rows_of(db,
               "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
               "'sqlite_%' ORDER BY name")) {
    for (const auto& column : rows_of(db,
                                      "SELECT name, type, \"notnull\", pk FROM "
                                      "pragma_table_info('" +
                                          table + "')")) {
      out.push_back(table + ": " + column);
    }
  }
  for (const auto& index : rows_of(db,
                                   "SELECT name, tbl_name FROM sqlite_master WHERE type = "
                                   "'index' AND name NOT LIKE 'sqlite_%' ORDER BY name")) {
    const std::string name = index.substr(0, index.find(' '));
    for (const auto& column : rows_of(db, "SELECT name FROM pragma_index_info('" + name + "')")) {
      out.push_back(index + ": " + column);
    }
  }
  return out;
}

// activegraph's store imported, and a scratch store written for a fork of
// its root at the fixture fork's point, as a worker writes it.
struct Scratch {
  ActivegraphFixture fixture;
  EventStore store{fixture.dir.path() / "store"};
  fs::path file = fixture.dir.path() / "scratch.db";
  std::string at;
  std::uint64_t initial = 0;
  RunId fork{"run_trial_fork"};

  Scratch() {
    REQUIRE(import_activegraph_sqlite(store, fixture.db));
    auto snapshot = store.snapshot();
    const auto forked = snapshot.run(RunId(fixture.runs["fork"]));
    REQUIRE(forked);
    REQUIRE(forked->fork_of);
    at = forked->fork_of->event_id.str();
    const auto root = snapshot.run(RunId(fixture.runs["root"]));
    REQUIRE(root);
    const auto point = snapshot.find_event(*root, forked->fork_of->event_id);
    REQUIRE(point);
    ScratchFork row{fork,
                    root->id,
                    forked->fork_of->event_id,
                    "what-if",
                    "2026-03-01T11:00:00.000000+00:00",
                    root->goal,
                    root->frame_id};
    auto written = write_scratch_store(file, row, [&](const auto& visit) {
      snapshot.for_each_event(*root, 1, [&](const EventView& event) {
        return event.seq <= point->seq && visit(event);
      });
    });
    REQUIRE(written);
    initial = *written;
    CHECK(initial == point->seq);
  }
};

constexpr const char* kRowColumns = "id, type, actor, payload, frame_id, caused_by, timestamp";

TEST_CASE("a scratch store has activegraph's layout and a fork's rows, byte for byte",
          "[import][scratch][activegraph]") {
  Scratch s;
  CHECK(layout_of(s.file) == layout_of(s.fixture.db));
  CHECK(rows_of(s.file, "SELECT key, value FROM meta") ==
        std::vector<std::string>{"schema_version | 1"});
  // The fork's rows are the rows activegraph copied into its own fork, up
  // to the fork point: the same bytes in every column, seq 1..n.
  const std::string fixture_fork = s.fixture.runs["fork"];
  auto expected =
      rows_of(s.fixture.db, std::string("SELECT ") + kRowColumns + " FROM events WHERE run_id = '" +
                                fixture_fork + "' ORDER BY seq LIMIT " + std::to_string(s.initial));
  REQUIRE(expected.size() == s.initial);
  CHECK(rows_of(s.file, std::string("SELECT ") + kRowColumns +
                            " FROM events WHERE run_id = 'run_trial_fork' ORDER BY seq") ==
        expected);
  CHECK(rows_of(s.file, "SELECT min(seq), max(seq), count(*) FROM events") ==
        std::vector<std::string>{"1 | " + std::to_string(s.initial) + " | " +
                                 std::to_string(s.initial)});
  // Its run row names its parent and fork point, and inherits goal and frame.
  auto fixture_run = rows_of(s.fixture.db,
                             "SELECT parent_run_id, forked_at_event_id, label, created_at, goal, "
                             "frame_id FROM runs WHERE run_id = '" +
                                 fixture_fork + "'");
  CHECK(rows_of(s.file,
                "SELECT parent_run_id, forked_at_event_id, label, created_at, goal, "
                "frame_id FROM runs") == fixture_run);
  // A scratch store is new: an existing file is refused and kept.
  auto again = write_scratch_store(
      s.file, ScratchFork{s.fork, RunId("r"), store::EventId("e"), "", "2026-03-01T11:00:00Z"},
      [](const auto&) {});
  REQUIRE_FALSE(again);
  CHECK(again.error().code == ErrorCode::conflict);
  CHECK(fs::exists(s.file));
}

TEST_CASE("what a child appends is read back in order with its bytes, and nothing else",
          "[import][scratch][activegraph]") {
  Scratch s;
  // What the child does: appends to its fork, and meddles with the rest.
  exec_sql(s.file,
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_t1', 'custom.seen', 'notes.collector', '{\"a\": 1,  \"b\": "
           "\"\xe2\x80\x98x\xe2\x80\x99\"}', "
           "NULL, 'evt_001', '2026-03-01T12:00:00Z', 'run_trial_fork');"
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_t2', 'behavior.failed', 'runtime', '{}', 'f', NULL, "
           "'2026-03-01T12:00:01Z', 'run_trial_fork');"
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_x', 'custom.elsewhere', NULL, '{}', NULL, NULL, '2026-03-01T12:00:02Z', "
           "'another_run');"
           "UPDATE events SET payload = '{\"rewritten\": true}' WHERE seq = 1;"
           "DELETE FROM events WHERE seq = 2;");
  auto appended = read_scratch_appended(s.file, s.fork, s.initial);
  REQUIRE(appended);
  CHECK_FALSE(appended->cut);
  REQUIRE(appended->events.size() == 2);
  const auto& first = appended->events[0];
  CHECK(first.id.str() == "evt_t1");
  CHECK(first.type == "custom.seen");
  CHECK(first.actor == "notes.collector");
  CHECK(first.payload == "{\"a\": 1,  \"b\": \"\xe2\x80\x98x\xe2\x80\x99\"}");
  CHECK_FALSE(first.frame_id);
  CHECK(first.caused_by == store::EventId("evt_001"));
  CHECK(first.timestamp == "2026-03-01T12:00:00Z");
  CHECK(appended->events[1].id.str() == "evt_t2");
  CHECK(appended->events[1].frame_id == "f");
  CHECK_FALSE(appended->events[1].caused_by);

  // Bounded: past the limits, the first rows and `cut`.
  auto two = read_scratch_appended(s.file, s.fork, s.initial, {.max_events = 1});
  REQUIRE(two);
  CHECK(two->cut);
  CHECK(two->events.size() == 1);
  auto small = read_scratch_appended(s.file, s.fork, s.initial, {.max_bytes = 60});
  REQUIRE(small);
  CHECK(small->cut);
  CHECK(small->events.empty());
}

namespace {

// This process's peak resident memory in kB since the last reset_peak().
long peak_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
  }
  return 0;
}
bool reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear);
}

}  // namespace

TEST_CASE("a child's row longer than its whole write budget is never read into memory",
          "[import][scratch][activegraph]") {
  Scratch s;
  // One row that fits, then a 64 MiB payload, then one more.
  exec_sql(s.file,
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_t1', 'custom.seen', NULL, '{}', NULL, NULL, '2026-03-01T12:00:00Z', "
           "'run_trial_fork');"
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_big', 'custom.big', NULL, '{\"x\": \"' || "
           "replace(hex(zeroblob(33554432)), '0', 'x') || '\"}', NULL, NULL, "
           "'2026-03-01T12:00:01Z', 'run_trial_fork');"
           "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id) "
           "VALUES ('evt_t3', 'custom.seen', NULL, '{}', NULL, NULL, '2026-03-01T12:00:02Z', "
           "'run_trial_fork');");
  const bool measured = reset_peak();
  const long before = peak_kb();
  auto appended =
      read_scratch_appended(s.file, s.fork, s.initial, {.max_events = 100, .max_bytes = 1 << 20});
  const long after = peak_kb();
  REQUIRE(appended);
  CHECK(appended->cut);
  REQUIRE(appended->events.size() == 1);
  CHECK(appended->events[0].id.str() == "evt_t1");
  if (measured) {
    INFO("peak before " << before << " kB, after " << after << " kB");
    CHECK(after - before < 16 * 1024);  // not the row's 64 MiB
  }
}

TEST_CASE("a scratch store the child reshaped is refused, naming what is wrong",
          "[import][scratch][activegraph]") {
  SECTION("a column that is not text") {
    Scratch s;
    exec_sql(s.file,
             "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, "
             "run_id) VALUES ('evt_t1', 'custom.seen', NULL, x'7b7d', NULL, NULL, "
             "'2026-03-01T12:00:00Z', 'run_trial_fork')");
    auto appended = read_scratch_appended(s.file, s.fork, s.initial);
    REQUIRE_FALSE(appended);
    CHECK(appended.error().code == ErrorCode::invalid_argument);
    CHECK_THAT(appended.error().message,
               Catch::Contains("the row at seq " + std::to_string(s.initial + 1)) &&
                   Catch::Contains("column \"payload\" that is not text"));
  }
  SECTION("events replaced by a view") {
    Scratch s;
    exec_sql(s.file,
             "ALTER TABLE events RENAME TO kept; CREATE VIEW events AS WITH RECURSIVE n(x) AS "
             "(SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS seq, 'i' AS id, 't' AS type, "
             "NULL AS actor, '{}' AS payload, NULL AS frame_id, NULL AS caused_by, 'ts' AS "
             "timestamp, 'run_trial_fork' AS run_id FROM n");
    auto appended = read_scratch_appended(s.file, s.fork, s.initial);
    REQUIRE_FALSE(appended);
    CHECK_THAT(appended.error().message, Catch::Contains("has no table \"events\""));
  }
  SECTION("a FIFO in the store's place") {
    TempDir dir;
    const auto file = dir.path() / "scratch.db";
    REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
    auto appended = read_scratch_appended(file, RunId("f"), 0);
    REQUIRE_FALSE(appended);
    CHECK_THAT(appended.error().message, Catch::Contains("is not a regular file"));
  }
  SECTION("not a database") {
    TempDir dir;
    const auto file = dir.write("scratch.db", std::string(4096, 'x'));
    auto appended = read_scratch_appended(file, RunId("f"), 0);
    REQUIRE_FALSE(appended);
    CHECK(appended.error().code == ErrorCode::invalid_argument);
  }
}

}  // namespace
}  // namespace forktrial::import
