#include "pack/pack_check.h"

#include <sys/stat.h>

namespace forktrial::pack {

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

  auto manifest = load_manifest(pack_dir, runtime);
  if (!manifest) {
    for (const auto& issue : manifest.error().issues) check.problems.push_back(issue.text());
    return check;
  }
  for (const auto& warning : manifest->warnings) check.warnings.push_back(warning.text());

  if (check.content_hash && *check.content_hash != manifest->content_hash) {
    check.problems.push_back(
        "pack.integrity.content_hash: the manifest says " + manifest->content_hash.str() +
        " but the files hash to " + check.content_hash->str() +
        " (the content hash covers every file except manifest.toml); if the change is "
        "intended, write the new value into the manifest");
  }
  if (manifest->runtime) {
    struct stat st {};
    const auto entry = pack_dir / manifest->runtime->entry;
    if (::lstat(entry.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      check.problems.push_back("runtime.entry: \"" + manifest->runtime->entry +
                               "\" is not a regular file in the pack; create it or fix the path");
    }
  }
  if (manifest->fixtures) {
    struct stat st {};
    const auto entry = pack_dir / manifest->fixtures->entrypoint;
    if (::lstat(entry.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      check.problems.push_back("fixtures.entrypoint: \"" + manifest->fixtures->entrypoint +
                               "\" is not a regular file in the pack; create it or fix the path");
    }
  }
  check.manifest = std::move(*manifest);
  return check;
}

}  // namespace forktrial::pack
