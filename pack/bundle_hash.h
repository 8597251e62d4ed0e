// Bundle and content hashes of a pack directory, byte-compatible with
// activegraph's pack manifest spec §4 (see docs/pack-format.md).
//
// The walk visits every regular file under the root, skipping entries whose
// name starts with '.', directories named `__pycache__` and files ending in
// `.pyc` (and fifos, sockets, devices). It rejects symlinks, paths that are not
// valid UTF-8 and paths that are not NFC-normalized, and files it cannot read.
// Every violation is collected; if there is any, nothing is hashed. Files are
// sorted by the UTF-8 bytes of their relative POSIX path and fed to SHA-256 as
// path bytes, NUL, 8-byte big-endian length, content. The content hash leaves
// out `manifest.toml` at the root; the bundle hash includes it.
//
// Files are streamed through a fixed buffer, never loaded whole. All functions
// are thread-compatible (no shared state); they read the directory as it is at
// call time: a tree changed during the walk yields an `unreadable` or changed-
// size violation rather than a silently wrong hash.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"

namespace forktrial::pack {

enum class WalkRule {
  root_missing,          // the root does not exist
  root_not_directory,    // the root exists but is not a directory
  symlink_to_file,       // a symlink whose target is a file (rule 2)
  symlink_to_directory,  // a symlink whose target is a directory (rule 2)
  symlink_dangling,      // a symlink whose target does not exist (rule 2)
  non_utf8_path,         // the relative path is not valid UTF-8 (rule 3)
  non_nfc_path,          // the relative path is not NFC-normalized (rule 3)
  unreadable,            // a file or directory could not be opened or read
};

// The rule's short name, e.g. "symlink-to-file".
std::string_view rule_name(WalkRule rule);

struct WalkViolation {
  std::string path;  // relative POSIX path, raw bytes as found on disk; "." for the root
  WalkRule rule;
  std::string detail;  // the human explanation, with errno text where one applies
  // "<path>: <detail> [rule]" with non-printable bytes escaped as \xNN.
  std::string message() const;
};

// A Status (invalid_argument) whose message lists every violation, one per
// line, headed by the root.
struct WalkViolations : Status {
  std::filesystem::path root;
  std::vector<WalkViolation> violations;  // sorted by path, never empty

  WalkViolations(std::filesystem::path walked, std::vector<WalkViolation> found);
};

struct TreeHashes {
  std::optional<Digest> bundle;   // set when requested
  std::optional<Digest> content;  // set when requested
  std::uint64_t files = 0;        // files in the bundle walk (manifest included)
  std::uint64_t bytes = 0;        // their total size
  // With HashRequest::keep_code: every path of the bundle walk, sorted, and
  // the bytes of the code files among them, exactly as they were hashed.
  std::vector<std::string> paths;
  std::map<std::string, std::string, std::less<>> code;
};

// Receives every file of the bundle walk as it is hashed, in hash order:
// file() with its relative path and size, then its bytes through content(),
// in chunks, exactly as they are fed to the hash. A walk that ends in a
// violation may have passed some files, or part of one: the caller discards
// what it received. Called on the walking thread only.
class FileSink {
 public:
  virtual ~FileSink() = default;
  virtual void file(std::string_view path, std::uint64_t size) = 0;
  virtual void content(std::string_view chunk) = 0;
};

struct HashRequest {
  bool bundle = true;
  bool content = true;
  // Keep the bytes of the files a runtime reads (manifest.toml at the root and
  // every file ending in ".lua") as they are fed to the hash, in the same
  // read: nothing is read twice, so the kept bytes are the hashed bytes.
  bool keep_code = false;
  // When set, receives every file of the walk in the same read (the pack
  // archive, pack/bundle_archive.h); must outlive the call.
  FileSink* sink = nullptr;
};

// True for the files HashRequest::keep_code keeps.
bool is_code_path(std::string_view path);

// One walk, computing the requested hashes together.
std::expected<TreeHashes, WalkViolations> hash_tree(const std::filesystem::path& root,
                                                    HashRequest request = {});

std::expected<Digest, WalkViolations> bundle_hash(const std::filesystem::path& root);
std::expected<Digest, WalkViolations> content_hash(const std::filesystem::path& root);

// Why a pin check failed: a Status (base/error.h) with the kind and, on a
// mismatch, the actual hash. A malformed pin or a directory breaking the walk
// rules is invalid_argument, a pin that does not match is
// failed_precondition. The message names the pin (and the actual hash on
// mismatch).
struct PinError : Status {
  enum class Kind { malformed_pin, walk_failed, mismatch };
  Kind kind;
  std::optional<Digest> actual;

  PinError(Kind pin_kind, std::string why, std::optional<Digest> actual_hash = std::nullopt)
      : Status{pin_kind == Kind::mismatch ? ErrorCode::failed_precondition
                                          : ErrorCode::invalid_argument,
               std::move(why)},
        kind(pin_kind),
        actual(actual_hash) {}
};

// The malformed_pin error for a pin that is not "sha256:" + 64 lowercase hex,
// or nullopt for a well-formed one. Reads no files.
std::optional<PinError> check_pin_form(std::string_view pin);

// Checks `expected` ("sha256:" + 64 lowercase hex) against `actual`, the
// bundle hash already computed for `root` (named in the message). Returns the
// verified digest, or why not (malformed_pin or mismatch).
std::expected<Digest, PinError> compare_pin(std::string_view expected, const Digest& actual,
                                            const std::filesystem::path& root);

// Checks `expected` ("sha256:" + 64 lowercase hex) against the bundle hash of
// `root`. Returns the verified digest, or why not.
std::expected<Digest, PinError> verify_bundle_hash(std::string_view expected,
                                                   const std::filesystem::path& root);

}  // namespace forktrial::pack
