// A pack as one canonical byte string, for shipping it to a worker, and its
// safe extraction into a content-addressed cache (docs/pack-format.md, "The
// pack archive").
//
// The archive holds exactly the files the bundle-hash walk covers, in its
// order, read in the same pass that hashes them: the same pack always gives
// the same bytes, and the archive's bundle hash is the directory's. The walk
// does not cover file modes, so neither does the archive: extracted files are
// plain read-only files.
//
// An archive is untrusted input. Reading one (check_archive, extract_archive,
// materialize) refuses, before anything is written, every path the walk would
// not produce or that could escape or alias inside the target (absolute, "..",
// ".", empty components, backslashes, NUL, names the walk skips, non-UTF-8 or
// non-NFC names, duplicates, a file that is also a directory of another path,
// paths out of the walk's order), truncated or trailing bytes, and more files,
// bytes or path length than ArchiveLimits allows. Symlinks are never created
// nor followed.
//
// Thread-safety: every function is thread-safe; materialize() is also safe
// against other threads and processes materializing into the same cache.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "pack/bundle_hash.h"
#include "pack/executor.h"

namespace forktrial::pack {

// Bounds on what an archive may hold, applied when writing one and when
// reading one. Far above any real pack; they stop a hostile archive from
// filling a worker's disk or inode table.
struct ArchiveLimits {
  std::uint64_t max_files = 10'000;
  std::uint64_t max_total_bytes = std::uint64_t{512} << 20;  // file contents, summed
  std::uint64_t max_path_bytes = 1024;                       // one relative path
};

// Why an archive could not be written, read or materialized. `message` names
// the path or offset and the values involved. `violations` is set (and the
// code is invalid_argument) when the pack directory breaks the walk's rules.
// Codes: invalid_argument for a malformed archive or pack, resource_exhausted
// for a limit, failed_precondition for a hash that does not match the pin or a
// target that exists, internal for a failing file system.
struct ArchiveError : Status {
  std::vector<WalkViolation> violations;

  ArchiveError(ErrorCode category, std::string why, std::vector<WalkViolation> found = {})
      : Status{category, std::move(why)}, violations(std::move(found)) {}
};

struct PackArchive {
  std::string bytes;        // the archive
  Digest bundle_hash;       // of the directory, computed in the same read
  std::uint64_t files = 0;  // files in the archive
  std::uint64_t content_bytes = 0;
};

// Archives the pack at `root` in one walk. Fails with the walk's violations,
// or when a path is one an archive may not hold (e.g. a backslash in a name,
// which the walk allows) or the pack exceeds `limits`.
std::expected<PackArchive, ArchiveError> archive_pack(const std::filesystem::path& root,
                                                      const ArchiveLimits& limits = {});

// What check_archive found: the bundle hash the extracted tree will have
// (computed from the archive alone, by the walk's rule 4), and its size.
struct ArchiveSummary {
  Digest bundle_hash;
  std::uint64_t files = 0;
  std::uint64_t content_bytes = 0;
  // What runs the pack once extracted (pack/executor.h), told from its
  // manifest.toml and whether an __init__.py is at its root.
  Executor executor = Executor::lua;
  // Its manifest validates and declares the pack deterministic
  // (pack/manifest.h, declares_deterministic).
  bool deterministic = false;
};

// Validates every rule of the format without writing anything.
std::expected<ArchiveSummary, ArchiveError> check_archive(std::string_view bytes,
                                                          const ArchiveLimits& limits = {});

// Checks `bytes` fully, then writes its files under `target_dir`, which must
// not exist (its parent must): it is created, filled, and left read-only
// (files 0444, directories 0555, the target included). A failure after the
// check (the file system) removes what was written.
std::expected<ArchiveSummary, ArchiveError> extract_archive(std::string_view bytes,
                                                            const std::filesystem::path& target_dir,
                                                            const ArchiveLimits& limits = {});

// The pack directory `<cache_dir>/<hex of expected>` holding the archive's
// files, verified by the hash walk to have bundle hash `expected`:
//   - under an exclusive lock on `<cache_dir>/<hex>.lock` (flock: serializes
//     threads and processes; the lock file is left in place),
//   - an existing directory is re-hashed and reused if it matches; otherwise
//     it is removed and rebuilt;
//   - the archive's own hash is checked against `expected` before anything is
//     written (failed_precondition when it differs);
//   - it is extracted into a temporary directory beside the final one
//     (".tmp-<hex>-..."; leftovers of a crashed process are removed under the
//     lock), hashed by the walk, and renamed into place.
// `cache_dir` is created if missing. The returned directory is read-only;
// nothing removes it while the caller uses it unless another materialize
// finds it tampered with.
std::expected<std::filesystem::path, ArchiveError> materialize(
    std::string_view bytes, const Digest& expected, const std::filesystem::path& cache_dir,
    const ArchiveLimits& limits = {});

// Removes the directory materialize() made for the pack pinned to `pin` in
// `cache_dir`, under the same lock; nothing when there is none. The caller
// makes sure no trial is using it.
std::optional<ArchiveError> dematerialize(const Digest& pin,
                                          const std::filesystem::path& cache_dir);

}  // namespace forktrial::pack
