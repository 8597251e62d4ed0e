#include "tools/results_sqlite.h"

#include <sqlite3.h>

#include <cstdint>
#include <string_view>

#include "tools/cli_support.h"

namespace forktrial::tools {
namespace {

using nlohmann::ordered_json;

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS jobs (
  job TEXT PRIMARY KEY, name TEXT, state TEXT, total INTEGER, done INTEGER,
  submitted_at TEXT, finished_at TEXT, status TEXT
);
CREATE TABLE IF NOT EXISTS results (
  job TEXT NOT NULL, trial_index INTEGER NOT NULL, trial TEXT, candidate TEXT, pin TEXT,
  scenario TEXT, at TEXT, status TEXT, outcome TEXT, exit_code INTEGER, detail TEXT,
  warnings TEXT, worker TEXT, attempts INTEGER, fork_run_id TEXT, events_appended INTEGER,
  behavior_failures INTEGER, behavior_failures_after_fork INTEGER, duration_ms INTEGER,
  executor TEXT, executor_version TEXT, "limit" TEXT, isolation TEXT, line TEXT NOT NULL,
  PRIMARY KEY (job, trial_index)
);
CREATE INDEX IF NOT EXISTS results_by_candidate ON results (job, candidate);
)";

// The result columns after (job, trial_index), each a field of the line
// (objects and arrays as JSON text), then the line.
constexpr const char* kFields[] = {"trial",
                                   "candidate",
                                   "pin",
                                   "scenario",
                                   "at",
                                   "status",
                                   "outcome",
                                   "exit_code",
                                   "detail",
                                   "warnings",
                                   "worker",
                                   "attempts",
                                   "fork_run_id",
                                   "events_appended",
                                   "behavior_failures",
                                   "behavior_failures_after_fork",
                                   "duration_ms",
                                   "executor",
                                   "executor_version",
                                   "limit",
                                   "isolation"};

void bind_value(sqlite3_stmt* statement, int column, const ordered_json& value) {
  if (value.is_null()) {
    sqlite3_bind_null(statement, column);
  } else if (value.is_number_integer()) {
    sqlite3_bind_int64(statement, column, value.get<std::int64_t>());
  } else if (value.is_number_unsigned()) {
    sqlite3_bind_int64(statement, column, static_cast<std::int64_t>(value.get<std::uint64_t>()));
  } else {
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    sqlite3_bind_text(statement, column, text.data(), static_cast<int>(text.size()),
                      SQLITE_TRANSIENT);
  }
}

}  // namespace

struct ResultsDatabase::Impl {
  std::string path;
  sqlite3* db = nullptr;
  sqlite3_stmt* job = nullptr;
  sqlite3_stmt* result = nullptr;

  [[noreturn]] void fail(const std::string& what) const {
    throw CommandFailed("cannot write the results to " + path + ": " + what + ": " +
                        (db != nullptr ? sqlite3_errmsg(db) : "no database"));
  }
  void exec(const char* sql) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
  }
  sqlite3_stmt* prepare(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      fail("cannot prepare a statement");
    }
    return statement;
  }
  void step(sqlite3_stmt* statement) {
    if (sqlite3_step(statement) != SQLITE_DONE) fail("cannot write a row");
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
  }
};

ResultsDatabase::ResultsDatabase(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  if (sqlite3_open_v2(path.c_str(), &impl_->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    impl_->fail("cannot open it");
  }
  impl_->exec(kSchema);
  impl_->job = impl_->prepare(
      "INSERT OR REPLACE INTO jobs (job, name, state, total, done, submitted_at, finished_at, "
      "status) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  std::string columns = "job, trial_index";
  std::string values = "?, ?";
  for (const char* field : kFields) {
    columns += std::string(", \"") + field + "\"";
    values += ", ?";
  }
  impl_->result = impl_->prepare("INSERT OR REPLACE INTO results (" + columns + ", line) VALUES (" +
                                 values + ", ?)");
}

ResultsDatabase::~ResultsDatabase() {
  sqlite3_finalize(impl_->job);
  sqlite3_finalize(impl_->result);
  sqlite3_close(impl_->db);
}

void ResultsDatabase::add_job(const ordered_json& status) {
  const auto field = [&](const char* key) {
    return status.contains(key) ? status[key] : ordered_json();
  };
  int column = 0;
  for (const char* key : {"job", "name", "state", "total", "done", "submitted_at", "finished_at"}) {
    bind_value(impl_->job, ++column, field(key));
  }
  bind_value(impl_->job, ++column, ordered_json(status.dump()));
  impl_->step(impl_->job);
}

void ResultsDatabase::add_results(const std::vector<std::string>& lines) {
  impl_->exec("BEGIN");
  for (const std::string& text : lines) {
    const auto line = ordered_json::parse(text, nullptr, false);
    if (!line.is_object()) continue;
    const auto field = [&](std::string_view key) {
      const auto found = line.find(key);
      return found == line.end() ? ordered_json() : *found;
    };
    int column = 0;
    bind_value(impl_->result, ++column, field("job"));
    bind_value(impl_->result, ++column, field("index"));
    for (const char* key : kFields) {
      ordered_json value = field(key);
      // The executor's name and version in columns of their own.
      if (std::string_view(key) == "executor" && value.is_object()) {
        value = value.value("name", ordered_json());
      } else if (std::string_view(key) == "executor_version") {
        const auto executor = field("executor");
        value = executor.is_object() ? executor.value("version", ordered_json()) : ordered_json();
      }
      bind_value(impl_->result, ++column, value);
    }
    bind_value(impl_->result, ++column, ordered_json(text));
    impl_->step(impl_->result);
  }
  impl_->exec("COMMIT");
}

}  // namespace forktrial::tools
