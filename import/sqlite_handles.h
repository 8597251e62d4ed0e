// What the import component's SQLite readers and writers share: owning
// handles, and text columns read as the bytes stored. Private to import/.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <optional>
#include <string>

namespace forktrial::import::sqlite {

struct CloseDb {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
struct FinalizeStmt {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using Db = std::unique_ptr<sqlite3, CloseDb>;
using Stmt = std::unique_ptr<sqlite3_stmt, FinalizeStmt>;

// Column `index` of the current row as the bytes stored, or nullopt for NULL.
inline std::optional<std::string> column_text(sqlite3_stmt* stmt, int index) {
  if (sqlite3_column_type(stmt, index) == SQLITE_NULL) return std::nullopt;
  const unsigned char* text = sqlite3_column_text(stmt, index);
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<std::size_t>(sqlite3_column_bytes(stmt, index)));
}

// The layout version of activegraph's SQLite store (its meta.schema_version)
// that forktrial reads and writes.
inline constexpr const char* kActivegraphSchemaVersion = "1";

}  // namespace forktrial::import::sqlite
