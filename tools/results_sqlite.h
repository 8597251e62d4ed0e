// Results written to a SQLite file, for analysis with the tools people know
// (`forktrial results JOB... --sqlite FILE`): a table of jobs and a table of
// results, one row per trial, each column a field of the result line and the
// line itself. Rows are upserted, so exporting a job again (once more of it
// has finished) brings it up to date; each page of results is one
// transaction, so memory is bounded by a page whatever the job's size.
//
// Not thread-safe: one owner. Errors: CommandFailed naming the file and
// SQLite's message.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace forktrial::tools {

class ResultsDatabase {
 public:
  // Opens (creating) the file and its tables.
  explicit ResultsDatabase(const std::string& path);
  ~ResultsDatabase();
  ResultsDatabase(const ResultsDatabase&) = delete;
  ResultsDatabase& operator=(const ResultsDatabase&) = delete;

  // A job's status (one element of `forktrial status --json`'s jobs).
  void add_job(const nlohmann::ordered_json& status);
  // Result lines (JSON objects, as `results --json` prints them), in one
  // transaction.
  void add_results(const std::vector<std::string>& lines);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace forktrial::tools
