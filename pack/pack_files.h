// A pack as the bytes that were hashed: one walk of the directory computes
// its bundle and content hashes and, in the same read, keeps the bytes of
// every file a runtime may read (manifest.toml and the .lua files). Whoever
// checks a pin against `bundle_hash()` and then runs code from `code()` runs
// exactly the bytes the pin covers: nothing is read from the directory again,
// so a file swapped on disk after the check never runs.
//
// Immutable once read; safe to share between threads. Memory: the code files
// are held whole (a pack's other files, fixtures and data, are only hashed).
#pragma once

#include <expected>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "pack/bundle_hash.h"

namespace forktrial::pack {

class PackFiles {
 public:
  // Walks `root` once (the §4 rules of bundle_hash.h: symlinks, non-UTF-8 or
  // non-NFC names, unreadable files are violations, and any violation means
  // no PackFiles).
  static std::expected<PackFiles, WalkViolations> read(const std::filesystem::path& root);

  const std::filesystem::path& root() const { return root_; }
  const Digest& bundle_hash() const { return bundle_; }
  const Digest& content_hash() const { return content_; }

  // Whether `path` (relative POSIX) is a file of the bundle walk. Files the
  // walk skips (names starting with '.', __pycache__, *.pyc) are not.
  bool contains(std::string_view path) const;
  // The hashed bytes of code file `path` (manifest.toml or a .lua file), or
  // nullptr when there is no such file in the walk. Valid while this lives.
  const std::string* code(std::string_view path) const;

  // Reads code file `relative` the way pack code may name files: a plain
  // relative path inside the pack (no absolute path, "..", "." or empty
  // components, no backslashes), ending in ".lua", present in the walk.
  // Otherwise a complete sentence naming the path as `what` ("scenario path",
  // "require(\"util\") file") and saying what is wrong.
  std::expected<std::string_view, Status> lua_file(std::string_view relative,
                                                   std::string_view what) const;

 private:
  std::filesystem::path root_;
  Digest bundle_;
  Digest content_;
  std::vector<std::string> paths_;  // sorted
  std::map<std::string, std::string, std::less<>> code_;
};

}  // namespace forktrial::pack
