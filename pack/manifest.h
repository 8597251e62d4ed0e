// manifest.toml: parsing and validation (see docs/pack-format.md for every rule).
//
// The tables are activegraph's — [pack], [pack.provenance], [pack.integrity],
// [dependencies], [surface], [fixtures] — plus forktrial's [runtime], which is
// required only when the pack is to be executed. Validation collects every
// violation before returning, each naming the offending field, so an author
// fixes a manifest in one pass. Keys forktrial does not know are reported as
// warnings, not errors, so manifests written for newer activegraph versions
// still validate.
//
// All functions are pure apart from reading the file; they are thread-safe.
#pragma once

#include <expected>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"

namespace forktrial::pack {

// The manifest's file name, at the root of every pack.
inline constexpr std::string_view kManifestFile = "manifest.toml";

// One problem in a manifest: the dotted field ("pack.version",
// "surface.capabilities[2].risk", or "manifest.toml" for the file as a whole)
// and what is wrong with it, including what to write instead.
struct ManifestIssue {
  std::string field;
  std::string message;
  std::string text() const { return field + ": " + message; }
  friend bool operator==(const ManifestIssue&, const ManifestIssue&) = default;
};

struct ManifestErrors {
  std::string source;                 // the file (or name) validated
  std::vector<ManifestIssue> issues;  // in document order, never empty
  std::string message() const;        // every issue, one per line
};

struct Capability {
  std::string name;
  std::string risk;          // low | medium | high
  std::string action_class;  // read | write | external
};

struct Surface {
  std::vector<std::string> object_types;
  std::vector<std::string> relation_types;
  std::vector<std::string> behaviors;
  std::vector<std::string> tools;
  std::string settings_schema;  // "" when the pack takes no settings
  std::vector<Capability> capabilities;
  std::vector<std::string> consumes;  // event types the pack reacts to
};

struct Fixtures {
  std::string entrypoint;  // relative path inside the pack
  bool deterministic = true;
};

struct RuntimeSection {
  std::string language;  // "lua"
  std::string entry;     // relative path of the entry file, e.g. "pack.lua"
};

struct Manifest {
  std::string name;
  std::string version;
  std::string description;
  std::string license;
  std::string authored_by;  // human | agent
  Digest content_hash;
  std::string runtime_range;                        // dependencies.forktrial or .activegraph
  std::string runtime_range_key;                    // which of the two was given
  std::map<std::string, std::string> dependencies;  // other packs: name -> version range
  Surface surface;
  std::optional<Fixtures> fixtures;
  std::optional<RuntimeSection> runtime;
  std::vector<ManifestIssue> warnings;  // unknown keys and tables
};

enum class RuntimeRequirement {
  optional,  // validating a pack as data ([runtime] checked if present)
  required,  // the pack is about to be executed: [runtime] must be present
};

// Parses and validates manifest text. `source` names it in messages.
std::expected<Manifest, ManifestErrors> parse_manifest(std::string_view text,
                                                       std::string_view source,
                                                       RuntimeRequirement runtime);

// Reads `<pack_dir>/manifest.toml` and validates it.
std::expected<Manifest, ManifestErrors> load_manifest(const std::filesystem::path& pack_dir,
                                                      RuntimeRequirement runtime);

// True for a relative path that stays inside the pack: not empty, not
// absolute, no "..", "." or empty components, no backslashes.
bool is_confined_relative_path(std::string_view path);

}  // namespace forktrial::pack
