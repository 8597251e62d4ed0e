// Checking a pack directory as a whole: its manifest against every rule, and
// the manifest's own content hash against the directory's actual content hash.
// The hash is compared whenever the manifest records a well-formed one, even
// when other manifest fields are wrong, so a tampered pack is always reported
// as tampered, together with everything else.
// This is what `forktrial pack check` runs and what the trial child runs before
// loading a pack.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pack/bundle_hash.h"
#include "pack/manifest.h"
#include "pack/pack_files.h"

namespace forktrial::pack {

struct PackCheck {
  std::optional<Manifest> manifest;    // set when the manifest validated
  std::optional<Digest> content_hash;  // the directory's actual content hash, when walkable
  std::optional<Digest> recorded_content_hash;  // the manifest's, when it could be read
  std::vector<std::string> problems;            // every problem found, each a complete sentence
  std::vector<std::string> warnings;            // things that do not fail the check
  bool ok() const { return problems.empty(); }
};

// Runs every check and collects every problem; never stops at the first.
PackCheck check_pack(const std::filesystem::path& pack_dir, RuntimeRequirement runtime);

// The same checks on a pack already read (the trial child's path): the
// manifest is the one whose bytes were hashed, and the files it names must be
// files of that walk. Reads nothing from disk.
PackCheck check_pack(const PackFiles& files, RuntimeRequirement runtime);

}  // namespace forktrial::pack
