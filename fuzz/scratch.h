// A directory for the fuzz targets that need files (a store, a SQLite file,
// a pack): made once per process under $TMPDIR (/tmp without it), removed
// when the process exits normally, as libFuzzer's does after -runs or
// -max_total_time.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace forktrial::fuzz {

inline const std::filesystem::path& scratch_dir() {
  // Never destroyed: the exit handler runs after static destructors would.
  static const std::filesystem::path* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/forktrial-fuzz.XXXXXX";
    if (!mkdtemp(pattern.data())) std::abort();
    auto* made = new std::filesystem::path(pattern);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
    });
    return made;
  }();
  return *dir;
}

}  // namespace forktrial::fuzz
