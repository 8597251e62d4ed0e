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
// The rules are activegraph's (`activegraph.packs.manifest.load_manifest`), so
// a manifest written for activegraph validates unchanged; where forktrial is
// stricter (names without whitespace, distinct surface entries, typed
// provenance fields) docs/pack-format.md says so.
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
#include "base/error.h"

namespace forktrial::pack {

// The manifest's file name, at the root of every pack.
inline constexpr std::string_view kManifestFile = "manifest.toml";

// One problem in a manifest: the dotted field ("pack.version",
// "surface.capabilities[2].risk_class", or "manifest.toml" for the file as a whole)
// and what is wrong with it, including what to write instead.
struct ManifestIssue {
  std::string field;
  std::string message;
  std::string text() const { return field + ": " + message; }
  friend bool operator==(const ManifestIssue&, const ManifestIssue&) = default;
};

// A gateway capability the pack registers (`[[surface.capabilities]]`),
// identified by provider and capability ("gmail" and "drafts.send", written
// "gmail.drafts.send" in messages and in `consumes`).
struct Capability {
  std::string provider;
  std::string capability;
  std::string risk_class;      // low | medium | high | critical
  std::string credential_ref;  // the name of a credential, never a value; "" for none
  std::string action_class;    // R0 | R1 | R2 | R3 | R4, or "" when undeclared
  std::string id() const { return provider + "." + capability; }
  friend bool operator==(const Capability&, const Capability&) = default;
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
  // `deterministic` was written, not defaulted: only a pack that declares
  // itself deterministic has its trials' results cached and reused.
  bool deterministic_declared = false;
};

struct RuntimeSection {
  std::string language;  // "lua"
  std::string entry;     // relative path of the entry file, e.g. "pack.lua"
};

// [pack.provenance]: where the pack came from. A disclosure, never a claim
// of trust.
struct Provenance {
  std::string authored_by;  // human | agent
  std::vector<std::string> authors;
  std::string generator;  // the authoring agent, when authored_by = "agent"
  std::string source_url;
  std::string created_at;  // as written (a string or a TOML date-time)
};

struct Dependencies {
  std::string runtime_range;                          // dependencies.forktrial or .activegraph
  std::string runtime_range_key;                      // which of the two was given
  std::string python_range;                           // dependencies.python; "" when absent
  std::vector<std::string> python_deps;               // PEP 508 strings, not resolved
  std::map<std::string, std::string> packs;           // [dependencies.packs]: name -> range
  std::map<std::string, std::string> optional_packs;  // [dependencies.optional-packs]
};

// A manifest. When it comes from `parse_manifest` every field validated; in
// `ManifestErrors::partial` a field that failed is left empty (unset).
struct Manifest {
  std::string name;
  std::string version;  // PEP 440, e.g. "0.1.0", "1.0.0rc1"
  std::string description;
  std::string license;  // may be empty
  Provenance provenance;
  std::optional<Digest> content_hash;  // always set once the manifest validated
  Dependencies dependencies;
  Surface surface;
  std::optional<Fixtures> fixtures;
  std::optional<RuntimeSection> runtime;
  std::vector<ManifestIssue> warnings;  // unknown keys and tables
};

// A Status (invalid_argument) whose message lists every issue, one per line.
struct ManifestErrors : Status {
  std::string source;                 // the file (or name) validated
  std::vector<ManifestIssue> issues;  // in document order, never empty
  // The fields that did validate, so a caller can still compare them with the
  // pack's files: a tampered pack is reported as tampered even when its
  // manifest has other problems. Empty when the text is not TOML.
  Manifest partial;

  ManifestErrors(std::string validated, std::vector<ManifestIssue> found, Manifest valid);
};

enum class RuntimeRequirement {
  optional,  // validating a pack as data ([runtime] checked if present)
  required,  // the pack is about to be executed: [runtime] must be present
};

// True for a PEP 440 version as activegraph checks it, e.g. "1", "0.1.0",
// "v1.0", "1.0.0rc1", "2.0.post1.dev3", "1.0+local.7" (ASCII digits only).
bool is_pep440_version(std::string_view text);

// True for a PEP 440 specifier set as activegraph checks it: comma-separated
// clauses, each an operator (~=, ==, !=, <=, >=, <, >, ===) and a version
// token of letters, digits and `_ . * + ! -`, e.g. ">=1.4,<2.0", "==1.*".
// The tokens are not parsed further (neither does activegraph).
bool is_pep440_specifier_set(std::string_view text);

// Parses and validates manifest text. `source` names it in messages.
std::expected<Manifest, ManifestErrors> parse_manifest(std::string_view text,
                                                       std::string_view source,
                                                       RuntimeRequirement runtime);

// Whether the manifest declares the pack deterministic ([fixtures]
// deterministic = true, written): a trial of it, given the same inputs,
// gives the same verdict (coordinator/result_cache.h).
bool declares_deterministic(const Manifest& manifest);

// Reads `<pack_dir>/manifest.toml` and validates it.
std::expected<Manifest, ManifestErrors> load_manifest(const std::filesystem::path& pack_dir,
                                                      RuntimeRequirement runtime);

// True for a relative path that stays inside the pack: not empty, not
// absolute, no "..", "." or empty components, no backslashes.
bool is_confined_relative_path(std::string_view path);

}  // namespace forktrial::pack
