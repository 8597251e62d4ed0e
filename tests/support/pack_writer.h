// Test support: packs written into a scratch directory. A PackSpec states what
// the manifest declares; the Lua code is given separately, so tests can make
// the two disagree. The manifest carries the real content hash of the files
// written, so the pack passes `pack check` unless a test breaks it on purpose.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/temp_dir.h"

namespace forktrial::testing {

struct PackSpec {
  std::string name = "candidate";
  std::string version = "0.1.0";
  std::vector<std::string> object_types;
  std::vector<std::string> relation_types;
  std::vector<std::string> behaviors;
  std::string capabilities = "[]";           // TOML array text
  std::string pack_lua;                      // pack.lua
  std::map<std::string, std::string> files;  // other files: relative path -> text
};

// A manifest.toml for `spec` recording `content_hash`, valid under
// RuntimeRequirement::required.
std::string manifest_text(const PackSpec& spec, std::string_view content_hash);

// The forktrial.pack{...} call matching `spec`'s declared types (no behaviors).
std::string pack_header(const PackSpec& spec);

// Writes the pack into `root` (created) and returns its bundle pin.
std::string write_pack(const std::filesystem::path& root, const PackSpec& spec);

// Writes the pack under `dir/relative`; returns the pack root.
std::filesystem::path write_pack(const TempDir& dir, std::string_view relative,
                                 const PackSpec& spec);

}  // namespace forktrial::testing
