#include "sandbox/scratch.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string_view>
#include <system_error>

namespace forktrial::sandbox {
namespace {

constexpr std::string_view kFinalPrefix = "forktrial-scratch-";
constexpr std::string_view kHiddenPrefix = ".forktrial-scratch-";
constexpr std::size_t kSuffixLength = 6;  // mkdtemp's XXXXXX
// A hidden directory older than this lost its owner between mkdtemp and flock.
constexpr auto kHiddenGrace = std::chrono::minutes(1);
// Final names drawn before giving up; each clash means a live or abandoned
// directory already has the name.
constexpr int kNamingAttempts = 100;

std::filesystem::path parent_or_default(const std::filesystem::path& parent) {
  if (!parent.empty()) return parent;
  const char* tmp = ::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// `prefix` followed by mkdtemp's six letters and digits, and nothing else.
bool named_like(std::string_view name, std::string_view prefix) {
  if (name.size() != prefix.size() + kSuffixLength || !name.starts_with(prefix)) return false;
  for (char c : name.substr(prefix.size())) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum) return false;
  }
  return true;
}

UniqueFd open_directory(int at, const std::string& path) {
  return UniqueFd(retry_eintr(
      [&] { return ::openat(at, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }));
}

// Removes `path` and everything in it. A child may have taken write or search
// permission from a directory of its scratch store; the owner's permissions
// are given back and the removal tried once more.
std::error_code remove_tree(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (!ec) return ec;
  std::error_code ignored;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ignored);
  for (auto it = std::filesystem::recursive_directory_iterator(path, ignored);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ignored)) {
    if (it->is_directory(ignored) && !it->is_symlink(ignored)) {
      std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ignored);
    }
  }
  ec.clear();
  std::filesystem::remove_all(path, ec);
  return ec;
}

// A directory just made under its hidden name: removed again unless it was
// renamed to its final name.
struct HiddenDir {
  std::string path;
  bool named = false;
  ~HiddenDir() {
    if (!named) ::rmdir(path.c_str());
  }
};

}  // namespace

ScratchDir::ScratchDir(const std::filesystem::path& parent) {
  const std::filesystem::path base = parent_or_default(parent);
  sweep_scratch_dirs(base);
  for (int attempt = 1;; ++attempt) {
    std::string pattern = (base / (std::string(kHiddenPrefix) + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw SystemError("mkdtemp(\"" + pattern + "\")", errno);
    }
    HiddenDir hidden{pattern};
    UniqueFd fd = open_directory(AT_FDCWD, hidden.path);
    if (!fd) throw SystemError("open(\"" + hidden.path + "\", O_DIRECTORY)", errno);
    // Locked before it is named: no sweeper ever sees the final name unlocked.
    if (retry_eintr([&] { return ::flock(fd.get(), LOCK_EX | LOCK_NB); }) != 0) {
      throw SystemError("flock(\"" + hidden.path + "\", LOCK_EX | LOCK_NB)", errno);
    }
    const std::filesystem::path final_path =
        base / std::filesystem::path(hidden.path).filename().string().substr(1);
    if (::renameat2(AT_FDCWD, hidden.path.c_str(), AT_FDCWD, final_path.c_str(),
                    RENAME_NOREPLACE) == 0) {
      hidden.named = true;
      path_ = final_path;
      lock_ = std::move(fd);
      return;
    }
    if (errno != EEXIST || attempt == kNamingAttempts) {
      throw SystemError(
          "renameat2(\"" + hidden.path + "\", \"" + final_path.string() + "\", RENAME_NOREPLACE)",
          errno);
    }
  }
}

ScratchDir::~ScratchDir() {
  // Removed while still locked, so a sweep cannot take the directory for
  // abandoned meanwhile; the lock goes with `lock_` afterwards.
  remove_tree(path_);
}

Sweep sweep_scratch_dirs(const std::filesystem::path& parent) {
  const std::filesystem::path base = parent_or_default(parent);
  Sweep sweep;
  UniqueFd dir = open_directory(AT_FDCWD, base.string());
  std::error_code ec;
  std::filesystem::directory_iterator entries(base, ec);
  if (!dir || ec) {
    sweep.problems.push_back("cannot read " + base.string() + " to sweep abandoned scratch " +
                             "directories: " + (ec ? ec.message() : errno_text(errno)));
    return sweep;
  }
  const auto now = std::chrono::system_clock::now();
  for (; entries != std::filesystem::directory_iterator(); entries.increment(ec)) {
    const std::string name = entries->path().filename().string();
    const bool hidden = named_like(name, kHiddenPrefix);
    if (!hidden && !named_like(name, kFinalPrefix)) continue;
    UniqueFd fd = open_directory(dir.get(), name);
    struct stat held {};
    if (!fd || ::fstat(fd.get(), &held) != 0) continue;  // gone meanwhile, or not a directory
    if (held.st_uid != ::geteuid()) continue;            // another user's to sweep
    if (hidden && now - std::chrono::system_clock::from_time_t(held.st_mtime) < kHiddenGrace) {
      continue;  // its owner may be about to lock it
    }
    if (retry_eintr([&] { return ::flock(fd.get(), LOCK_EX | LOCK_NB); }) != 0) continue;  // owned
    // The owner may have removed the directory between our open and our lock,
    // and a new owner taken the name: remove only what we locked.
    struct stat named {};
    if (::fstatat(dir.get(), name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
        named.st_dev != held.st_dev || named.st_ino != held.st_ino) {
      continue;
    }
    const auto path = base / name;
    if (auto error = remove_tree(path)) {
      sweep.problems.push_back("cannot remove the abandoned scratch directory " + path.string() +
                               ": " + error.message());
    } else {
      sweep.removed.push_back(path);
    }
  }
  if (ec) {
    sweep.problems.push_back("cannot read on in " + base.string() + " to sweep abandoned " +
                             "scratch directories: " + ec.message());
  }
  return sweep;
}

}  // namespace forktrial::sandbox
