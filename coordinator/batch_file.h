// Batch files: many trials submitted at once (`forktrial submit nightly.toml`).
// A batch file is read into a Batch, a validated list of trial
// specifications, each pinned to the pack bytes that were read; the format is
// docs/batch-file.md.
//
// Two forms are read:
//   - TOML, a matrix: every candidate x scenario x fork point x repeat, with
//     the batch's limits (human units accepted: "10s", "256M");
//   - JSON Lines, one TrialSpecification per line, forktrial's or
//     activegraph's form (sandbox::parse_trial_specification).
// A file ending in ".jsonl" is JSON Lines, one ending in ".toml" TOML; any
// other is JSON Lines when its first non-blank character is '{' (no TOML
// document starts with one), TOML otherwise.
//
// Every pack directory is walked and hashed once, however many trials use it
// (pack::PackFiles, the runtime's own reader), so a pin ("expect") is checked
// against the bytes on disk and each trial's PackSource carries the hash that
// was read: the trials run exactly what was read here, or fail to
// materialize if a directory changes before they run.
//
// Reading is all or nothing: every problem in the file is reported at once,
// each naming its key path ("candidates[1].expect", "limits.max_rss") or, in
// JSON Lines, its line ("line 3: limits.max_events: ..."), and what to do;
// nothing partial is returned.
//
// Thread-compatible: no shared state; the functions read the file and the
// pack directories as they are at call time. Untrusted input: the file size,
// the number of trials and the lengths of ids are bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "coordinator/orchestration.h"
#include "sandbox/trial_types.h"

namespace forktrial::coordinator {

// The most trials one batch may hold. A Batch holds every specification in
// memory (about 0.5 KiB each with its paths and label), and the matrix
// multiplies quickly: one wrong number should be refused, not fill memory.
inline constexpr std::uint64_t kMaxBatchTrials = 1'000'000;
// The largest batch file read: a TOML matrix is a few lines; JSON Lines holds
// one specification (well under 1 KiB) per trial.
inline constexpr std::uint64_t kMaxTomlBatchBytes = std::uint64_t{1} << 20;         // 1 MiB
inline constexpr std::uint64_t kMaxJsonLinesBatchBytes = std::uint64_t{512} << 20;  // 512 MiB

enum class BatchFormat { toml, json_lines };

// A pack directory the batch uses, listed once, with its bundle hash as read:
// what a submitter uploads.
struct BatchPack {
  std::string root_dir;  // absolute and lexically normal, as in the trials' PackSources
  Digest bundle_hash;
  friend bool operator==(const BatchPack&, const BatchPack&) = default;
};

struct Batch {
  std::string name;  // `name`, or the file name without its extension
  int priority = 0;  // higher runs first; JSON Lines batches have 0
  // TOML: candidate-major order (for each candidate, each scenario, each fork
  // point, each repeat), labelled "<name> <candidate> <scenario>@<at> #<n>"
  // (scenario "idle" when the batch has none). JSON Lines: file order, the
  // labels as given. Every root_dir is absolute and every pack is pinned
  // (expected_bundle_hash) to the hash that was read.
  std::vector<sandbox::TrialSpecification> trials;
  // The candidate each trial evaluates, by name, for results: `name`, or
  // its directory's name (JSON Lines: its directory's name). One per trial.
  std::vector<std::string> candidates;
  std::vector<BatchPack> packs;  // in order of first use
  // `keep_forks` and `keep_forks_after` (TOML only): the job's own retention.
  std::optional<RetentionPolicy> retention;
};

// The format `text`, read from `file`, is in (see the top of this file).
BatchFormat detect_batch_format(const std::filesystem::path& file, std::string_view text);

// Parses `text` as the content of the batch file `file`: relative pack paths
// resolve against the directory of `file` (made absolute against the current
// directory), and the batch's default name is its stem. Reads and hashes the
// pack directories. Errors: every problem, as described above.
std::expected<Batch, Problems> parse_batch(std::string_view text,
                                           const std::filesystem::path& file);

// Reads `file` (at most kMaxJsonLinesBatchBytes, or kMaxTomlBatchBytes for
// TOML) and parses it with parse_batch. A file that cannot be read is one
// problem naming it and errno's text.
std::expected<Batch, Problems> read_batch_file(const std::filesystem::path& file);

}  // namespace forktrial::coordinator
