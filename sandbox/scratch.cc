#include "sandbox/scratch.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
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

namespace {

constexpr const char* kStoreDir = "store";
constexpr std::array<const char*, 2> kStoreFiles = {"data.mdb", "lock.mdb"};

// An inode the pool made, held open, and what it was made as.
struct Held {
  UniqueFd fd;
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t mode = 0;
};

Held hold(UniqueFd fd, const std::string& what) {
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) throw SystemError("open or fstat " + what, errno);
  return Held{std::move(fd), st.st_dev, st.st_ino, st.st_mode};
}

// The file `fd` has no extended attributes but security.* ones, which a
// process without privileges cannot set (a list too long to read is taken
// for one that has others).
bool only_security_attributes(int fd) {
  std::array<char, 1024> names{};
  const ssize_t length = ::flistxattr(fd, names.data(), names.size());
  if (length < 0) return false;
  for (ssize_t at = 0; at < length;) {
    const std::string_view attribute(names.data() + at);
    if (!attribute.starts_with("security.")) return false;
    at += static_cast<ssize_t>(attribute.size()) + 1;
  }
  return true;
}

// `held` is still `name` in the directory `at`, with `links` links, its mode,
// and no extended attributes but security.* ones; `size`, when given, is its
// size.
bool unchanged(int at, const char* name, const Held& held, nlink_t links,
               std::optional<off_t> size = std::nullopt) {
  struct stat named {};
  struct stat now {};
  if (::fstatat(at, name, &named, AT_SYMLINK_NOFOLLOW) != 0 || ::fstat(held.fd.get(), &now) != 0) {
    return false;
  }
  return named.st_dev == held.dev && named.st_ino == held.ino && now.st_mode == held.mode &&
         now.st_nlink == links && (!size || now.st_size == *size) &&
         only_security_attributes(held.fd.get());
}

// The directory `fd` holds exactly the entries `expected` (besides . and ..),
// read through the descriptor, so a directory renamed into its place is not
// the one read.
bool holds_exactly(int fd, std::vector<std::string_view> expected) {
  if (::lseek(fd, 0, SEEK_SET) != 0) return false;
  alignas(dirent64) std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t n = ::getdents64(fd, buffer.data(), buffer.size());
    if (n < 0) return false;
    if (n == 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer.data() + at);
      const std::string_view name(entry->d_name);
      at += entry->d_reclen;
      if (name == "." || name == "..") continue;
      const auto it = std::find(expected.begin(), expected.end(), name);
      if (it == expected.end()) return false;
      expected.erase(it);
    }
  }
  return expected.empty();
}

}  // namespace

struct ScratchPool::Entry {
  ScratchDir dir;
  Held self;   // the scratch directory
  Held store;  // its store directory
  std::array<Held, kStoreFiles.size()> files;

  explicit Entry(const std::filesystem::path& parent) : dir(parent) {
    const std::string where = dir.path().string();
    self = hold(UniqueFd(::fcntl(dir.fd(), F_DUPFD_CLOEXEC, 0)), where);
    if (::mkdirat(dir.fd(), kStoreDir, 0700) != 0) {
      throw SystemError("mkdir(\"" + where + "/" + kStoreDir + "\")", errno);
    }
    store = hold(
        UniqueFd(::openat(dir.fd(), kStoreDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)),
        where + "/" + kStoreDir);
    for (std::size_t i = 0; i < kStoreFiles.size(); ++i) files[i] = new_file(i);
  }

  // Store file `i`, made anew in the store directory (which must not hold
  // it); throws SystemError when it cannot be.
  Held new_file(std::size_t i) const {
    return hold(UniqueFd(::openat(store.fd.get(), kStoreFiles[i],
                                  O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)),
                dir.path().string() + "/" + kStoreDir + "/" + kStoreFiles[i]);
  }

  // As the pool made it, its files of `size` bytes (any size: none given).
  bool as_made(std::optional<off_t> size) const {
    // The scratch directory's links: its name, its own ".", and store's "..".
    if (!holds_exactly(self.fd.get(), {kStoreDir}) ||
        !holds_exactly(store.fd.get(), {kStoreFiles[0], kStoreFiles[1]})) {
      return false;
    }
    // Still the directory under its name (the store is opened by path).
    struct stat named {};
    struct stat dir_now {};
    if (::lstat(dir.path().c_str(), &named) != 0 || named.st_dev != self.dev ||
        named.st_ino != self.ino || ::fstat(self.fd.get(), &dir_now) != 0 ||
        dir_now.st_nlink != 3 || dir_now.st_mode != self.mode ||
        !only_security_attributes(self.fd.get())) {
      return false;
    }
    if (!unchanged(self.fd.get(), kStoreDir, store, 2)) return false;
    for (std::size_t i = 0; i < kStoreFiles.size(); ++i) {
      if (!unchanged(store.fd.get(), kStoreFiles[i], files[i], 1, size)) return false;
    }
    return true;
  }

  // Replaces both files with new empty ones, once they are checked to be
  // the pool's. New files rather than truncated ones: ext4 writes back a
  // file truncated to nothing when it is next closed (its auto_da_alloc
  // heuristic), and then discards its blocks at the next truncation, which
  // cost more than the unlink and the create.
  bool reset() noexcept {
    if (!as_made(std::nullopt)) return false;
    try {
      for (std::size_t i = 0; i < kStoreFiles.size(); ++i) {
        if (::unlinkat(store.fd.get(), kStoreFiles[i], 0) != 0) return false;
        files[i] = new_file(i);
      }
    } catch (const SystemError&) {
      return false;
    }
    return as_made(0);
  }
};

ScratchPool::ScratchPool(std::filesystem::path parent) : parent_(std::move(parent)) {}

ScratchPool::~ScratchPool() = default;

ScratchPool::Lease ScratchPool::lease() {
  {
    std::unique_lock lock(mutex_);
    while (!idle_.empty()) {
      std::unique_ptr<Entry> entry = std::move(idle_.back());
      idle_.pop_back();
      // Idle, no child of it runs; but one that outlived its trial could
      // have changed it since its reset.
      if (entry->as_made(0)) return Lease(*this, std::move(entry));
      ++discarded_;
      lock.unlock();
      entry.reset();  // removes the directory, outside the lock
      lock.lock();
    }
  }
  return Lease(*this, std::make_unique<Entry>(parent_));
}

void ScratchPool::give_back(std::unique_ptr<Entry> entry) noexcept {
  const bool reusable = entry->reset();
  {
    std::lock_guard lock(mutex_);
    if (reusable) {
      idle_.push_back(std::move(entry));
      return;
    }
    ++discarded_;
  }
  entry.reset();  // removes the directory, outside the lock
}

std::size_t ScratchPool::idle() const {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

std::size_t ScratchPool::discarded() const {
  std::lock_guard lock(mutex_);
  return discarded_;
}

ScratchPool::Lease::Lease(ScratchPool& pool, std::unique_ptr<Entry> entry)
    : pool_(&pool), entry_(std::move(entry)) {}

ScratchPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_), entry_(std::move(other.entry_)) {}

ScratchPool::Lease::~Lease() {
  if (entry_) pool_->give_back(std::move(entry_));
}

const std::filesystem::path& ScratchPool::Lease::path() const {
  return entry_->dir.path();
}

std::filesystem::path ScratchPool::Lease::store_path() const {
  return entry_->dir.path() / kStoreDir;
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
