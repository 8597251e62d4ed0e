#include "pack/pack_files.h"

#include <algorithm>

#include "pack/manifest.h"

namespace forktrial::pack {
namespace {

// Why `relative` is not a plain relative path inside the pack.
std::string refusal(std::string_view relative, std::string_view what) {
  const std::string quoted = std::string(what) + " \"" + std::string(relative) + "\"";
  if (!relative.empty() && relative.front() == '/') {
    return quoted + " is absolute; give a path relative to the pack root";
  }
  std::size_t start = 0;
  while (start <= relative.size()) {
    const std::size_t slash = relative.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? relative.size() : slash;
    if (relative.substr(start, end - start) == "..") {
      return quoted + " leaves the pack root (\"..\" is not allowed)";
    }
    start = end + 1;
  }
  return quoted +
         " is not a plain relative path inside the pack root (no empty or \".\" components, "
         "no backslashes)";
}

}  // namespace

std::expected<PackFiles, WalkViolations> PackFiles::read(const std::filesystem::path& root) {
  auto hashes = hash_tree(root, {.bundle = true, .content = true, .keep_code = true});
  if (!hashes) return std::unexpected(std::move(hashes.error()));
  PackFiles files;
  files.root_ = root;
  files.bundle_ = *hashes->bundle;
  files.content_ = *hashes->content;
  files.paths_ = std::move(hashes->paths);
  files.code_ = std::move(hashes->code);
  return files;
}

bool PackFiles::contains(std::string_view path) const {
  return std::binary_search(paths_.begin(), paths_.end(), path,
                            [](std::string_view a, std::string_view b) { return a < b; });
}

const std::string* PackFiles::code(std::string_view path) const {
  const auto it = code_.find(path);
  return it == code_.end() ? nullptr : &it->second;
}

std::expected<std::string_view, Status> PackFiles::lua_file(std::string_view relative,
                                                            std::string_view what) const {
  if (!is_confined_relative_path(relative))
    return failure(ErrorCode::invalid_argument, refusal(relative, what));
  const std::string quoted = std::string(what) + " \"" + std::string(relative) + "\"";
  if (!relative.ends_with(".lua")) {
    return failure(ErrorCode::invalid_argument,
                   quoted + " does not end in \".lua\"; only Lua files can run");
  }
  if (const std::string* bytes = code(relative)) return std::string_view(*bytes);
  return failure(ErrorCode::invalid_argument,
                 quoted + " is not a file of the pack at " + root_.string() +
                     " (files and directories whose names start with '.' are not part of a "
                     "pack)");
}

}  // namespace forktrial::pack
