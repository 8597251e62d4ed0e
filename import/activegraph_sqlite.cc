#include "import/activegraph_sqlite.h"

#include <sqlite3.h>

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>

#include "base/text.h"
#include "base/timestamp.h"
#include "import/sqlite_handles.h"
#include "store/json_text.h"

namespace forktrial::import {

using store::event_text_problem;
using store::EventId;
using store::EventStore;
using store::NewEvent;
using store::NewRun;
using store::Refusal;
using store::Refused;
using store::Result;
using store::run_text_problem;
using store::RunId;
using store::RunInfo;
using store::Writer;
namespace json_text = store::json_text;

namespace {

using sqlite::column_text;
using sqlite::Db;
using sqlite::kActivegraphSchemaVersion;
using sqlite::Stmt;

std::unexpected<Refusal> invalid(std::string message) {
  return std::unexpected(Refusal{Refused::invalid_input, std::move(message)});
}

struct ImportedRun {
  RunId id;
  std::string label;
  std::optional<std::string> created_at;
  std::optional<RunId> parent;
  std::optional<EventId> forked_at;
  std::optional<std::string> goal;
  std::optional<std::string> frame_id;
  std::vector<NewEvent> events;
};

class SqliteFile {
 public:
  explicit SqliteFile(const std::filesystem::path& file) : file_(file) {}

  std::optional<std::string> open() {
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(file_.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    db_.reset(raw);
    if (rc != SQLITE_OK) {
      return "cannot open " + file_.string() + " as an SQLite database: " +
             (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
    }
    // One read transaction over the whole import: activegraph keeps its
    // store in WAL mode, and a runtime may append while we read; every
    // SELECT below then sees the same committed state (the first one fixes
    // the snapshot), whatever is written meanwhile.
    if (sqlite3_exec(db_.get(), "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
      return "cannot read " + file_.string() + ": " + sqlite3_errmsg(db_.get());
    }
    return std::nullopt;
  }

  // The column names of `table`; empty if the table does not exist.
  std::expected<std::set<std::string>, std::string> columns(const std::string& table) {
    auto stmt = prepare("PRAGMA table_info(\"" + table + "\")");
    if (!stmt) return std::unexpected(stmt.error());
    std::set<std::string> names;
    while (sqlite3_step(stmt->get()) == SQLITE_ROW) {
      names.insert(reinterpret_cast<const char*>(sqlite3_column_text(stmt->get(), 1)));
    }
    return names;
  }

  std::expected<Stmt, std::string> prepare(const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
      return std::unexpected("cannot read " + file_.string() + " (" + sql +
                             "): " + sqlite3_errmsg(db_.get()));
    }
    return Stmt(raw);
  }

  std::string error() const { return sqlite3_errmsg(db_.get()); }
  const std::filesystem::path& path() const { return file_; }

 private:
  std::filesystem::path file_;
  Db db_;
};

// "col" when the table has it, else "NULL", so optional columns read as null.
std::string optional_column(const std::set<std::string>& columns, const std::string& name) {
  return columns.contains(name) ? "\"" + name + "\"" : "NULL";
}

std::optional<std::string> missing_column(const SqliteFile& file, const std::string& table,
                                          const std::set<std::string>& have,
                                          std::initializer_list<const char*> required) {
  for (const char* name : required) {
    if (!have.contains(name)) {
      return file.path().string() + ": table \"" + table + "\" has no column \"" + name +
             "\", which an activegraph store has (docs/store-format.md lists the columns read)";
    }
  }
  return std::nullopt;
}

// Why the file is not a store of the layout this importer reads, or nullopt.
std::optional<std::string> schema_version_problem(SqliteFile& file) {
  auto meta = file.columns("meta");
  if (!meta) return meta.error();
  if (meta->empty()) {
    return file.path().string() +
           " has no table \"meta\"; an activegraph store records its schema_version there";
  }
  auto stmt = file.prepare("SELECT value FROM meta WHERE key = 'schema_version'");
  if (!stmt) return stmt.error();
  if (sqlite3_step(stmt->get()) != SQLITE_ROW) {
    return file.path().string() +
           ": table \"meta\" has no schema_version; an activegraph store records one";
  }
  const std::string found = column_text(stmt->get(), 0).value_or("NULL");
  if (found != kActivegraphSchemaVersion) {
    const std::string shown = bounded_escaped(found, 64);
    return file.path().string() + ": activegraph schema_version \"" + shown +
           "\" is not one forktrial reads (it reads schema_version \"" + kActivegraphSchemaVersion +
           "\"); migrate the store with the activegraph version that wrote it, or import a "
           "JSON Lines export of the run instead";
  }
  return std::nullopt;
}

// The number of rows each run has in activegraph's compaction archive
// (events_archive; absent in stores older than compaction).
std::expected<std::unordered_map<std::string, std::int64_t>, std::string> archived_counts(
    SqliteFile& file) {
  std::unordered_map<std::string, std::int64_t> counts;
  auto columns = file.columns("events_archive");
  if (!columns) return std::unexpected(columns.error());
  if (!columns->contains("run_id")) return counts;
  auto stmt = file.prepare("SELECT run_id, COUNT(*) FROM events_archive GROUP BY run_id");
  if (!stmt) return std::unexpected(stmt.error());
  while (sqlite3_step(stmt->get()) == SQLITE_ROW) {
    counts[column_text(stmt->get(), 0).value_or("")] = sqlite3_column_int64(stmt->get(), 1);
  }
  return counts;
}

// A compacted run keeps only a runtime.snapshot marker and what followed it
// in `events`; its state before the marker lives in `snapshots` and its
// earlier events in `events_archive`. Imported as it stands it would be a
// run whose graph is empty, so it is refused, naming the marker.
std::optional<std::string> compaction_problem(
    const SqliteFile& file, const ImportedRun& run,
    const std::unordered_map<std::string, std::int64_t>& archived) {
  auto marker = std::find_if(run.events.begin(), run.events.end(),
                             [](const NewEvent& e) { return e.type == "runtime.snapshot"; });
  auto moved = archived.find(run.id.str());
  const std::int64_t archived_rows = moved == archived.end() ? 0 : moved->second;
  if (marker == run.events.end() && archived_rows == 0) return std::nullopt;
  std::string message = file.path().string() + ": run " + run.id.str() + " is compacted: ";
  if (marker != run.events.end()) {
    message += "its event " + marker->id.str() +
               " (runtime.snapshot) stands for the state of the events before it";
  } else {
    message += "it has no runtime.snapshot event";
  }
  if (archived_rows > 0) {
    message += ", and " + std::to_string(archived_rows) +
               " of its events were moved to the table events_archive";
  } else {
    message += ", which were archived (in its parent run, for a fork)";
  }
  return message +
         "; forktrial does not import compacted runs, since the rest would replay as a graph "
         "missing that state. Import the store from before compaction, or a JSON Lines export "
         "of the run made before it was compacted";
}

Result<std::vector<ImportedRun>> read_runs(SqliteFile& file) {
  if (auto problem = file.open()) return invalid(*problem);
  auto run_columns = file.columns("runs");
  if (!run_columns) return invalid(run_columns.error());
  auto event_columns = file.columns("events");
  if (!event_columns) return invalid(event_columns.error());
  for (const char* table : {"runs", "events"}) {
    if ((table == std::string("runs") ? *run_columns : *event_columns).empty()) {
      return invalid(file.path().string() + " has no table \"" + table +
                     "\"; an activegraph store has the tables \"runs\" and \"events\"");
    }
  }
  if (auto problem = schema_version_problem(file)) return invalid(*problem);
  if (auto problem = missing_column(file, "runs", *run_columns, {"run_id"})) {
    return invalid(*problem);
  }
  if (auto problem = missing_column(file, "events", *event_columns,
                                    {"run_id", "seq", "id", "type", "payload", "timestamp"})) {
    return invalid(*problem);
  }

  auto runs = file.prepare("SELECT run_id, " + optional_column(*run_columns, "label") + ", " +
                           optional_column(*run_columns, "created_at") + ", " +
                           optional_column(*run_columns, "parent_run_id") + ", " +
                           optional_column(*run_columns, "forked_at_event_id") + ", " +
                           optional_column(*run_columns, "goal") + ", " +
                           optional_column(*run_columns, "frame_id") + " FROM runs ORDER BY rowid");
  if (!runs) return invalid(runs.error());
  std::vector<ImportedRun> result;
  int rc;
  while ((rc = sqlite3_step(runs->get())) == SQLITE_ROW) {
    sqlite3_stmt* s = runs->get();
    auto id = column_text(s, 0);
    if (!id || id->empty()) return invalid(file.path().string() + ": a run has an empty id");
    ImportedRun run;
    run.id = RunId(*id);
    run.label = column_text(s, 1).value_or("");
    run.created_at = column_text(s, 2);
    run.goal = column_text(s, 5);
    run.frame_id = column_text(s, 6);
    if (auto problem =
            run_text_problem(NewRun{run.id, run.label, run.created_at, run.goal, run.frame_id})) {
      return invalid(file.path().string() + ": " +
                     (problem->field == "id" ? "" : "run " + *id + ": ") + problem->message);
    }
    if (auto parent = column_text(s, 3)) run.parent = RunId(*parent);
    if (auto at = column_text(s, 4)) run.forked_at = EventId(*at);
    if (run.parent && !run.forked_at) {
      return invalid(file.path().string() + ": run " + *id + " has parent_run_id " +
                     run.parent->str() + " but no forked_at_event_id");
    }
    result.push_back(std::move(run));
  }
  if (rc != SQLITE_DONE)
    return invalid("reading the runs of " + file.path().string() + ": " + file.error());

  auto events = file.prepare("SELECT id, type, payload, timestamp, " +
                             optional_column(*event_columns, "actor") + ", " +
                             optional_column(*event_columns, "frame_id") + ", " +
                             optional_column(*event_columns, "caused_by") +
                             ", seq FROM events WHERE run_id = ?1 ORDER BY seq");
  if (!events) return invalid(events.error());
  auto archived = archived_counts(file);
  if (!archived) return invalid(archived.error());
  for (ImportedRun& run : result) {
    sqlite3_stmt* s = events->get();
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, run.id.str().c_str(), -1, SQLITE_TRANSIENT);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      std::string where = file.path().string() + ": run " + run.id.str() + ", event at seq " +
                          std::to_string(sqlite3_column_int64(s, 7));
      NewEvent event;
      event.id = EventId(column_text(s, 0).value_or(""));
      event.type = column_text(s, 1).value_or("");
      event.timestamp = column_text(s, 3).value_or("");
      event.actor = column_text(s, 4);
      event.frame_id = column_text(s, 5);
      if (auto cause = column_text(s, 6)) event.caused_by = EventId(*cause);
      auto text_problem = event_text_problem(event);
      // The row is named by its id once the id is known to be fit to print.
      if (!text_problem || text_problem->field != "id") where += " (" + event.id.str() + ")";
      if (text_problem) return invalid(where + ": " + text_problem->message);
      auto payload = column_text(s, 2);
      if (!payload) return invalid(where + ": payload is NULL");
      // Kept as recorded: checked, never re-serialized (store/json_text.h).
      if (auto problem = json_text::payload_problem(*payload)) {
        return invalid(where + ": payload " + (problem->starts_with("holds") ? "" : "is ") +
                       *problem);
      }
      event.payload = std::move(*payload);
      if (auto parsed = parse_timestamp(event.timestamp); !parsed) {
        return invalid(where + ": " + parsed.error().message);
      }
      run.events.push_back(std::move(event));
    }
    if (rc != SQLITE_DONE) {
      return invalid("reading the events of run " + run.id.str() + ": " + file.error());
    }
    if (auto problem = compaction_problem(file, run, *archived)) return invalid(*problem);
  }
  return result;
}

}  // namespace

Result<std::vector<RunInfo>> import_activegraph_sqlite(EventStore& store,
                                                       const std::filesystem::path& path) {
  SqliteFile file(path);
  auto runs = read_runs(file);
  if (!runs) return std::unexpected(runs.error());

  // Parents before forks; each run's full history of ids, to find fork
  // points and to recognise a fork whose rows repeat its inherited prefix.
  std::unordered_map<RunId, std::size_t> index;
  for (std::size_t i = 0; i < runs->size(); ++i) {
    if (!index.emplace((*runs)[i].id, i).second) {
      return invalid(path.string() + ": run id " + (*runs)[i].id.str() + " appears twice");
    }
  }
  std::vector<std::size_t> order;
  std::unordered_map<RunId, std::vector<std::string>> history_ids;
  std::vector<bool> placed(runs->size(), false);
  while (order.size() < runs->size()) {
    bool progress = false;
    for (std::size_t i = 0; i < runs->size(); ++i) {
      ImportedRun& run = (*runs)[i];
      if (placed[i]) continue;
      std::vector<std::string> ids;
      if (run.parent) {
        if (!index.contains(*run.parent)) {
          return invalid(path.string() + ": run " + run.id.str() + " names parent run " +
                         run.parent->str() + ", which is not in the file");
        }
        auto parent_ids = history_ids.find(*run.parent);
        if (parent_ids == history_ids.end()) continue;  // parent not placed yet
        const auto& inherited = parent_ids->second;
        auto at = std::find(inherited.begin(), inherited.end(), run.forked_at->str());
        if (at == inherited.end()) {
          return invalid(path.string() + ": run " + run.id.str() + " is forked at event " +
                         run.forked_at->str() + ", which is not in the history of run " +
                         run.parent->str());
        }
        ids.assign(inherited.begin(), at + 1);
        // A store that copies the prefix into the fork's rows: drop the copy.
        bool copied =
            run.events.size() >= ids.size() &&
            std::equal(ids.begin(), ids.end(), run.events.begin(),
                       [](const std::string& id, const NewEvent& e) { return id == e.id.str(); });
        if (copied) run.events.erase(run.events.begin(), run.events.begin() + ids.size());
      }
      for (const NewEvent& e : run.events) ids.push_back(e.id.str());
      history_ids.emplace(run.id, std::move(ids));
      placed[i] = true;
      order.push_back(i);
      progress = true;
    }
    if (!progress) {
      return invalid(path.string() + ": the runs' parent_run_id values form a cycle");
    }
  }

  return store.write([&](Writer& w) -> Result<std::vector<RunInfo>> {
    std::vector<RunInfo> imported;
    for (std::size_t i : order) {
      const ImportedRun& run = (*runs)[i];
      NewRun spec{run.id, run.label, run.created_at, run.goal, run.frame_id};
      auto created = run.parent ? w.fork(*run.parent, *run.forked_at, spec) : w.create_run(spec);
      if (!created) return std::unexpected(created.error());
      auto head = w.append(run.id, created->head, run.events);
      if (!head) {
        return std::unexpected(Refusal{head.error().kind, path.string() + ": run " + run.id.str() +
                                                              ": " + head.error().message});
      }
      created->head = *head;
      imported.push_back(std::move(*created));
    }
    return imported;
  });
}

}  // namespace forktrial::import
