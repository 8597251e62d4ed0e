// What the trial child's executable holds. Every trial starts one, so it
// links only what a trial needs (sandbox/CMakeLists.txt lists it).
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <string>

#include "sandbox/trial.h"

namespace forktrial::sandbox {
namespace {

TEST_CASE("the trial child carries no SQLite", "[sandbox][child]") {
  std::ifstream in(default_child_path(), std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A dynamic child names the libraries it loads (libsqlite3.so.0), a static
  // one the functions it holds (sqlite3_*); the store's LMDB is there.
  CHECK(bytes.find("mdb_txn_begin") != std::string::npos);
  CHECK(bytes.find("sqlite3") == std::string::npos);
}

}  // namespace
}  // namespace forktrial::sandbox
