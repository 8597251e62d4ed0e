#include "runtime/confined_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "base/unique_fd.h"
#include "pack/manifest.h"

namespace forktrial::runtime {
namespace {

std::vector<std::string> split_components(std::string_view relative) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= relative.size()) {
    const std::size_t slash = relative.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? relative.size() : slash;
    parts.emplace_back(relative.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Why `relative` is not a plain path inside the root.
std::string refusal(std::string_view relative, std::string_view what) {
  const std::string quoted = std::string(what) + " \"" + std::string(relative) + "\"";
  if (!relative.empty() && relative.front() == '/') {
    return quoted + " is absolute; give a path relative to the pack root";
  }
  for (const auto& part : split_components(relative)) {
    if (part == "..") return quoted + " leaves the pack root (\"..\" is not allowed)";
  }
  return quoted +
         " is not a plain relative path inside the pack root (no empty or \".\" components, "
         "no backslashes)";
}

// Explains why openat() of `component` under `dir` failed with `error`.
std::string open_failure(int dir, const std::string& component, const std::string& so_far,
                         int error, std::string_view relative, std::string_view what) {
  const std::string quoted = std::string(what) + " \"" + std::string(relative) + "\"";
  struct stat st {};
  if (::fstatat(dir, component.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return quoted + ": \"" + so_far + "\" is a symlink; symlinks are refused inside a pack";
  }
  if (error == ENOENT) return quoted + ": \"" + so_far + "\" does not exist in the pack root";
  if (error == ENOTDIR) return quoted + ": \"" + so_far + "\" is not a directory";
  return quoted + ": cannot open \"" + so_far + "\": " + errno_text(error);
}

}  // namespace

std::expected<std::string, std::string> read_confined_file(const std::filesystem::path& root,
                                                           std::string_view relative,
                                                           std::string_view what) {
  if (!pack::is_confined_relative_path(relative)) return std::unexpected(refusal(relative, what));

  UniqueFd dir(
      retry_eintr([&] { return ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }));
  if (!dir) {
    return std::unexpected("cannot open the pack root " + root.string() + ": " + errno_text(errno));
  }
  const std::vector<std::string> parts = split_components(relative);
  std::string so_far;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    so_far += (i == 0 ? "" : "/") + parts[i];
    const bool last = i + 1 == parts.size();
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    UniqueFd next(retry_eintr([&] { return ::openat(dir.get(), parts[i].c_str(), flags); }));
    if (!next) {
      return std::unexpected(open_failure(dir.get(), parts[i], so_far, errno, relative, what));
    }
    dir = std::move(next);
  }

  struct stat st {};
  if (::fstat(dir.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return std::unexpected(std::string(what) + " \"" + std::string(relative) +
                           "\" is not a regular file");
  }
  std::string content;
  char buffer[16384];
  for (;;) {
    const ssize_t n = retry_eintr([&] { return ::read(dir.get(), buffer, sizeof buffer); });
    if (n < 0) {
      return std::unexpected(std::string(what) + " \"" + std::string(relative) +
                             "\": read failed: " + errno_text(errno));
    }
    if (n == 0) break;
    content.append(buffer, static_cast<std::size_t>(n));
  }
  return content;
}

}  // namespace forktrial::runtime
