#include "import/activegraph_scratch.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <system_error>

#include "import/sqlite_handles.h"

namespace forktrial::import {

namespace {

using sqlite::column_text;
using sqlite::Db;
using sqlite::Stmt;

// activegraph's SQLite layout (store/sqlite.py): its tables and indexes, as
// tests/import/activegraph_store.py writes them too.
constexpr std::array kActivegraphSchema = {
    "CREATE TABLE IF NOT EXISTS events (\n"
    "        seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "        id TEXT NOT NULL,\n"
    "        type TEXT NOT NULL,\n"
    "        actor TEXT,\n"
    "        payload TEXT NOT NULL,\n"
    "        frame_id TEXT,\n"
    "        caused_by TEXT,\n"
    "        timestamp TEXT NOT NULL,\n"
    "        run_id TEXT NOT NULL,\n"
    "        UNIQUE(id, run_id))",
    "CREATE INDEX IF NOT EXISTS idx_events_run ON events(run_id, seq)",
    "CREATE INDEX IF NOT EXISTS idx_events_type ON events(type)",
    "CREATE TABLE IF NOT EXISTS runs (\n"
    "        run_id TEXT PRIMARY KEY,\n"
    "        parent_run_id TEXT,\n"
    "        forked_at_event_id TEXT,\n"
    "        label TEXT,\n"
    "        created_at TEXT NOT NULL,\n"
    "        goal TEXT,\n"
    "        frame_id TEXT)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events_archive (\n"
    "        seq INTEGER,\n"
    "        id TEXT NOT NULL,\n"
    "        type TEXT NOT NULL,\n"
    "        actor TEXT,\n"
    "        payload TEXT NOT NULL,\n"
    "        frame_id TEXT,\n"
    "        caused_by TEXT,\n"
    "        timestamp TEXT NOT NULL,\n"
    "        run_id TEXT NOT NULL,\n"
    "        archived_at TEXT NOT NULL,\n"
    "        UNIQUE(id, run_id))",
    "CREATE INDEX IF NOT EXISTS idx_archive_run ON events_archive(run_id, seq)",
    "CREATE TABLE IF NOT EXISTS snapshots (\n"
    "        state_hash TEXT PRIMARY KEY,\n"
    "        blob TEXT NOT NULL,\n"
    "        created_at TEXT NOT NULL)",
};

// A VM step budget for reading back: a file the child shaped cannot make a
// read run long (the progress handler is called every kProgressSteps).
constexpr int kProgressSteps = 1000;
constexpr std::uint64_t kMaxProgressCalls = 200'000;  // 2e8 steps

class ScratchDb {
 public:
  ScratchDb(const std::filesystem::path& file, int flags) : file_(file) {
    sqlite3* raw = nullptr;
    rc_ = sqlite3_open_v2(file.c_str(), &raw, flags, nullptr);
    db_.reset(raw);
  }

  std::optional<Status> open_problem(ErrorCode code) const {
    if (rc_ == SQLITE_OK) return std::nullopt;
    return Status{code, "cannot open " + file_.string() + " as an SQLite database: " +
                            (db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc_))};
  }

  Status problem(ErrorCode code, const std::string& what) const {
    return {code, what + " in " + file_.string() + ": " + sqlite3_errmsg(db_.get())};
  }

  std::optional<Status> exec(const char* sql, const std::string& what) {
    if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr) == SQLITE_OK) return std::nullopt;
    return problem(ErrorCode::internal, what);
  }

  std::expected<Stmt, Status> prepare(const char* sql, ErrorCode code) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql, -1, &raw, nullptr) != SQLITE_OK) {
      return std::unexpected(problem(code, std::string("cannot prepare \"") + sql + "\""));
    }
    return Stmt(raw);
  }

  sqlite3* get() const { return db_.get(); }
  const std::filesystem::path& path() const { return file_; }

 private:
  std::filesystem::path file_;
  Db db_;
  int rc_ = SQLITE_OK;
};

// Binds `text` as the bytes given (never copied, never re-encoded), or NULL.
void bind_text(sqlite3_stmt* stmt, int index, std::optional<std::string_view> text) {
  if (!text) {
    sqlite3_bind_null(stmt, index);
    return;
  }
  sqlite3_bind_text64(stmt, index, text->data(), text->size(), SQLITE_STATIC, SQLITE_UTF8);
}

std::expected<std::uint64_t, Status> write_rows(ScratchDb& db, const ScratchFork& fork,
                                                const HistorySource& history) {
  for (const char* statement : kActivegraphSchema) {
    if (auto problem = db.exec(statement, "cannot create activegraph's tables")) {
      return std::unexpected(*problem);
    }
  }
  if (auto problem = db.exec("BEGIN", "cannot begin writing")) return std::unexpected(*problem);
  auto meta = db.prepare("INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                         ErrorCode::internal);
  if (!meta) return std::unexpected(meta.error());
  bind_text(meta->get(), 1, std::string_view(sqlite::kActivegraphSchemaVersion));
  if (sqlite3_step(meta->get()) != SQLITE_DONE) {
    return std::unexpected(db.problem(ErrorCode::internal, "cannot write meta"));
  }
  auto run = db.prepare(
      "INSERT INTO runs (run_id, parent_run_id, forked_at_event_id, label, created_at, goal, "
      "frame_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
      ErrorCode::internal);
  if (!run) return std::unexpected(run.error());
  bind_text(run->get(), 1, fork.fork.str());
  bind_text(run->get(), 2, fork.parent.str());
  bind_text(run->get(), 3, fork.at.str());
  bind_text(run->get(), 4, fork.label);
  bind_text(run->get(), 5, fork.created_at);
  bind_text(run->get(), 6, fork.goal);
  bind_text(run->get(), 7, fork.frame_id);
  if (sqlite3_step(run->get()) != SQLITE_DONE) {
    return std::unexpected(db.problem(ErrorCode::internal, "cannot write the fork's run row"));
  }
  auto insert = db.prepare(
      "INSERT INTO events (seq, id, type, actor, payload, frame_id, caused_by, timestamp, "
      "run_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
      ErrorCode::internal);
  if (!insert) return std::unexpected(insert.error());
  std::uint64_t n = 0;
  std::optional<Status> failed;
  history([&](const store::EventView& event) {
    sqlite3_stmt* s = insert->get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(n + 1));
    bind_text(s, 2, event.id);
    bind_text(s, 3, event.type);
    bind_text(s, 4, event.actor);
    bind_text(s, 5, event.payload);
    bind_text(s, 6, event.frame_id);
    bind_text(s, 7, event.caused_by);
    bind_text(s, 8, event.timestamp);
    bind_text(s, 9, fork.fork.str());
    if (sqlite3_step(s) != SQLITE_DONE) {
      failed = db.problem(ErrorCode::internal,
                          "cannot write event " + std::string(event.id) + " of the history");
      return false;
    }
    ++n;
    return true;
  });
  if (failed) return std::unexpected(*failed);
  if (auto problem = db.exec("COMMIT", "cannot commit")) return std::unexpected(*problem);
  return n;
}

}  // namespace

std::expected<std::uint64_t, Status> write_scratch_store(const std::filesystem::path& file,
                                                         const ScratchFork& fork,
                                                         const HistorySource& history) {
  std::error_code ec;
  if (std::filesystem::symlink_status(file, ec).type() != std::filesystem::file_type::not_found) {
    return failure(ErrorCode::conflict, file.string() + " exists; a scratch store is new");
  }
  std::expected<std::uint64_t, Status> written;
  {
    ScratchDb db(file, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW);
    if (auto problem = db.open_problem(ErrorCode::internal)) {
      written = std::unexpected(*problem);
    } else {
      written = write_rows(db, fork, history);
    }
  }
  if (!written) std::filesystem::remove(file, ec);
  return written;
}

std::expected<ScratchAppended, Status> read_scratch_appended(const std::filesystem::path& file,
                                                             const store::RunId& fork,
                                                             std::uint64_t initial_events,
                                                             const ScratchLimits& limits) {
  // A FIFO or a device in its place would block or never end the read.
  std::error_code ec;
  if (std::filesystem::symlink_status(file, ec).type() != std::filesystem::file_type::regular) {
    return failure(ErrorCode::invalid_argument,
                   file.string() + " is not a regular file; the trial child's store is one");
  }
  ScratchDb db(file, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW);
  if (auto problem = db.open_problem(ErrorCode::invalid_argument)) {
    return std::unexpected(*problem);
  }
  // Nothing the file holds runs: no triggers, no views, no functions a
  // schema names, no writes to the schema; and a bound on the work.
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_ENABLE_VIEW, 0, nullptr);
  // No value longer than the bytes the whole delta may hold is ever read
  // into memory: SQLite refuses it (SQLITE_TOOBIG) from its size alone, so a
  // child's one 600 MB row costs no 600 MB here.
  const auto longest = static_cast<int>(std::min<std::uint64_t>(
      limits.max_bytes,
      static_cast<std::uint64_t>(sqlite3_limit(db.get(), SQLITE_LIMIT_LENGTH, -1))));
  sqlite3_limit(db.get(), SQLITE_LIMIT_LENGTH, std::max(longest, 1024));
  std::uint64_t progress_calls = 0;
  sqlite3_progress_handler(
      db.get(), kProgressSteps,
      [](void* calls) { return ++*static_cast<std::uint64_t*>(calls) > kMaxProgressCalls ? 1 : 0; },
      &progress_calls);

  auto kind = db.prepare("SELECT type FROM sqlite_master WHERE name = 'events'",
                         ErrorCode::invalid_argument);
  if (!kind) return std::unexpected(kind.error());
  if (sqlite3_step(kind->get()) != SQLITE_ROW || column_text(kind->get(), 0) != "table") {
    return failure(ErrorCode::invalid_argument,
                   file.string() + " has no table \"events\"; the trial child keeps one");
  }
  auto rows = db.prepare(
      "SELECT seq, id, type, actor, payload, frame_id, caused_by, timestamp FROM events "
      "WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
      ErrorCode::invalid_argument);
  if (!rows) return std::unexpected(rows.error());
  sqlite3_stmt* s = rows->get();
  bind_text(s, 1, fork.str());
  sqlite3_bind_int64(s, 2, static_cast<sqlite3_int64>(initial_events));
  sqlite3_bind_int64(s, 3, static_cast<sqlite3_int64>(limits.max_events + 1));

  ScratchAppended out;
  std::uint64_t bytes = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (out.events.size() == limits.max_events) {
      out.cut = true;
      break;
    }
    const std::string seq = std::to_string(sqlite3_column_int64(s, 0));
    // activegraph writes these columns as text; NULL only where it allows.
    constexpr std::array<const char*, 7> kColumns = {"id",       "type",      "actor",    "payload",
                                                     "frame_id", "caused_by", "timestamp"};
    constexpr std::array<bool, 7> kNullable = {false, false, true, false, true, true, false};
    for (int c = 0; c < 7; ++c) {
      const int type = sqlite3_column_type(s, c + 1);
      if (type == SQLITE_TEXT || (type == SQLITE_NULL && kNullable[c])) continue;
      return failure(ErrorCode::invalid_argument, file.string() + ": the row at seq " + seq +
                                                      " of run " + fork.str() + " has a column \"" +
                                                      kColumns[c] + "\" that is " +
                                                      (type == SQLITE_NULL ? "NULL" : "not text") +
                                                      "; activegraph writes text there");
    }
    for (int c = 1; c <= 7; ++c) bytes += static_cast<std::uint64_t>(sqlite3_column_bytes(s, c));
    if (bytes > limits.max_bytes) {
      out.cut = true;
      break;
    }
    store::NewEvent event;
    event.id = store::EventId(*column_text(s, 1));
    event.type = *column_text(s, 2);
    event.actor = column_text(s, 3);
    event.payload = *column_text(s, 4);
    event.frame_id = column_text(s, 5);
    if (auto caused_by = column_text(s, 6)) event.caused_by = store::EventId(*caused_by);
    event.timestamp = *column_text(s, 7);
    out.events.push_back(std::move(event));
  }
  if (rc == SQLITE_TOOBIG) {
    out.cut = true;  // a value longer than the delta may be in all
    return out;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    return std::unexpected(db.problem(ErrorCode::invalid_argument, "cannot read the events"));
  }
  return out;
}

}  // namespace forktrial::import
