// A store written the way activegraph writes it, by
// tests/import/activegraph_store.py, for the import tests.
#pragma once

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace forktrial::testing {

inline constexpr const char* kGenerator = FORKTRIAL_SOURCE_DIR "/tests/import/activegraph_store.py";

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// An activegraph store written by the generator, with its runs by role
// ("root", "fork", "compacted") and export-trace's bytes for each.
struct ActivegraphFixture {
  TempDir dir;
  std::filesystem::path db = dir.path() / "activegraph.db";
  std::map<std::string, std::string> runs;

  explicit ActivegraphFixture(std::vector<std::string> flags = {}) {
    std::vector<std::string> argv = {"python3", kGenerator, db.string(), "--export-dir",
                                     dir.path().string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto result = run_command(argv);
    INFO("generator stderr: " << result.err);
    REQUIRE(result.exit_code == 0);
    for (const std::string& line : forktrial::testing::lines_of(result.out)) {
      const auto space = line.find(' ');
      runs[line.substr(0, space)] = line.substr(space + 1);
    }
    REQUIRE(runs.contains("root"));
    REQUIRE(runs.contains("fork"));
  }

  std::string export_trace(const std::string& role) const {
    return read_file(dir.path() / (role + ".jsonl"));
  }

  // The payload column of every row of `run`, in seq order.
  std::vector<std::string> stored_payloads(const std::string& run) const {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    std::unique_ptr<sqlite3, decltype(&sqlite3_close)> conn(raw, sqlite3_close);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(raw, "SELECT payload FROM events WHERE run_id = ? ORDER BY seq", -1,
                               &stmt, nullptr) == SQLITE_OK);
    sqlite3_bind_text(stmt, 1, run.c_str(), -1, SQLITE_TRANSIENT);
    std::vector<std::string> payloads;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      payloads.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
                            static_cast<std::size_t>(sqlite3_column_bytes(stmt, 0)));
    }
    sqlite3_finalize(stmt);
    return payloads;
  }
};

// Runs `sql` on the SQLite file `db`.
inline void exec_sql(const std::filesystem::path& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &raw) == SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error);
  INFO(sql << ": " << (error != nullptr ? error : ""));
  sqlite3_free(error);
  sqlite3_close(raw);
  REQUIRE(rc == SQLITE_OK);
}

}  // namespace forktrial::testing
