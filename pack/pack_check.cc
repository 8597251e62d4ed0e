#include "pack/pack_check.h"

#include <sys/stat.h>

#include <functional>

namespace forktrial::pack {
namespace {

// The checks that compare the manifest with the pack's files: its recorded
// content hash, and the files it names. They run on whatever part of the
// manifest validated, so that a tampered pack is reported as tampered even
// when its manifest has problems too. `is_file` says whether a relative path
// is a regular file of the pack.
void check_against_files(PackCheck& check, const Manifest& manifest,
                         const std::function<bool(const std::string&)>& is_file) {
  for (const auto& warning : manifest.warnings) check.warnings.push_back(warning.text());
  check.recorded_content_hash = manifest.content_hash;
  if (check.content_hash && manifest.content_hash &&
      *check.content_hash != *manifest.content_hash) {
    check.problems.push_back(
        "pack.integrity.content_hash: the manifest says " + manifest.content_hash->str() +
        " but the files hash to " + check.content_hash->str() +
        " (the content hash covers every file except manifest.toml); if the change is "
        "intended, write the new value into the manifest");
  }
  if (manifest.runtime && !is_file(manifest.runtime->entry)) {
    check.problems.push_back("runtime.entry: \"" + manifest.runtime->entry +
                             "\" is not a regular file in the pack; create it or fix the path");
  }
  if (manifest.fixtures && !is_file(manifest.fixtures->entrypoint)) {
    check.problems.push_back("fixtures.entrypoint: \"" + manifest.fixtures->entrypoint +
                             "\" is not a regular file in the pack; create it or fix the path");
  }
}

// Records what validation found, then compares it with the files; the
// manifest is kept only when it validated.
void check_manifest(PackCheck& check, std::expected<Manifest, ManifestErrors> manifest,
                    const std::function<bool(const std::string&)>& is_file) {
  if (!manifest) {
    for (const auto& issue : manifest.error().issues) check.problems.push_back(issue.text());
    check_against_files(check, manifest.error().partial, is_file);
    return;
  }
  check_against_files(check, *manifest, is_file);
  check.manifest = std::move(*manifest);
}

}  // namespace

PackCheck check_pack(const std::filesystem::path& pack_dir, RuntimeRequirement runtime) {
  PackCheck check;
  auto hashes = hash_tree(pack_dir, {.bundle = false, .content = true});
  if (!hashes) {
    for (const auto& violation : hashes.error().violations) {
      check.problems.push_back(violation.message());
    }
    // Without a directory there is no manifest to report on.
    const auto rule = hashes.error().violations.front().rule;
    if (rule == WalkRule::root_missing || rule == WalkRule::root_not_directory) return check;
  } else {
    check.content_hash = hashes->content;
  }

  check_manifest(check, load_manifest(pack_dir, runtime), [&](const std::string& relative) {
    struct stat st {};
    const auto path = pack_dir / relative;
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  });
  return check;
}

PackCheck check_pack(const PackFiles& files, RuntimeRequirement runtime) {
  PackCheck check;
  check.content_hash = files.content_hash();
  const std::string source = (files.root() / kManifestFile).string();
  const std::string* text = files.code(kManifestFile);
  if (text == nullptr) {
    check.problems.push_back(std::string(kManifestFile) +
                             ": is missing; every pack has a manifest.toml at its root");
    return check;
  }
  check_manifest(check, parse_manifest(*text, source, runtime),
                 [&](const std::string& relative) { return files.contains(relative); });
  return check;
}

}  // namespace forktrial::pack
