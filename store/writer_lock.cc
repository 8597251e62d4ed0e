#include "store/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace forktrial::store {

namespace {

// Lines and fields of the lock file are bounded: its text is read from a
// file anyone who can write the store could have written.
constexpr std::size_t kMaxLockText = 4096;
constexpr std::size_t kMaxCommand = 512;

// Printable ASCII stays; every other byte (control characters, line breaks
// that would start a field of their own, bytes of other scripts that a cut
// could split) becomes '?'.
std::string plain(std::string_view text, std::size_t limit) {
  std::string out;
  for (char c : text.substr(0, limit)) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte >= 0x20 && byte < 0x7f ? c : '?';
  }
  if (text.size() > limit) out += "...";
  return out;
}

std::string this_host() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "an unknown host";
  return plain(name.data(), 255);
}

std::string this_command() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string raw(kMaxCommand + 1, '\0');
  file.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  raw.resize(static_cast<std::size_t>(file.gcount()));
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return plain(raw, kMaxCommand);
}

std::optional<LockHolder> parse(std::string_view text) {
  LockHolder holder;
  bool any = false;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string_view name(line.data(), space);
    const std::string_view value = std::string_view(line).substr(space + 1);
    if (name == "pid") {
      int pid = 0;
      if (std::from_chars(value.data(), value.data() + value.size(), pid).ec == std::errc{}) {
        holder.pid = pid;
        any = true;
      }
    } else if (name == "host") {
      holder.host = plain(value, 255);
    } else if (name == "command") {
      holder.command = plain(value, kMaxCommand);
    }
  }
  if (!any) return std::nullopt;
  return holder;
}

std::string read_text(int fd) {
  std::string text(kMaxLockText, '\0');
  const ssize_t got = retry_eintr([&] { return ::pread(fd, text.data(), text.size(), 0); });
  text.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return text;
}

std::expected<UniqueFd, Status> open_lock_file(const std::filesystem::path& path, int flags) {
  UniqueFd fd(retry_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC, 0644); }));
  if (!fd) {
    const int error = errno;
    std::string message =
        "cannot open the store's lock file " + path.string() + ": " + std::strerror(error);
    if (error == EACCES || error == EPERM || error == EROFS) {
      message += ": this user (uid " + std::to_string(::geteuid()) +
                 ") may not write the store; run as the user that owns it, or give a store this "
                 "user may write";
    }
    return failure(error_code_of_errno(error), message);
  }
  return fd;
}

// Whether the file open as `fd` is held by an exclusive flock, as the
// kernel's table of locks (/proc/locks) says: read, not probed with a lock
// of this process's own, which a take() at that instant would meet.
bool locked_exclusively(int fd) {
  struct stat file {};
  if (::fstat(fd, &file) != 0) return false;
  char id[64];
  std::snprintf(id, sizeof id, "%02x:%02x:%llu", major(file.st_dev), minor(file.st_dev),
                static_cast<unsigned long long>(file.st_ino));
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    // "1: FLOCK  ADVISORY  WRITE 4242 fe:00:10952837 0 EOF"; a waiter's
    // line has "->" before its kind, and holds nothing.
    std::istringstream words(line);
    std::string number, kind, mode, access, pid, where;
    words >> number >> kind >> mode >> access >> pid >> where;
    if (kind == "FLOCK" && access == "WRITE" && where == id) return true;
  }
  return false;
}

}  // namespace

std::filesystem::path writer_lock_path(const std::filesystem::path& store) {
  return store / "writer.lock";
}

std::string describe(const LockHolder& holder) {
  if (holder.pid == 0) return "a process that has not said which yet";
  std::string out = "pid " + std::to_string(holder.pid);
  if (!holder.host.empty()) out += " on " + holder.host;
  if (!holder.command.empty()) out += ": " + holder.command;
  return out;
}

std::expected<WriterLock, Status> WriterLock::take(const std::filesystem::path& store,
                                                   std::string_view role) {
  std::error_code made;
  std::filesystem::create_directories(store, made);
  if (made) {
    return failure(error_code_of_errno(made.value()),
                   "cannot make the store's directory " + store.string() + ": " + made.message());
  }
  const auto path = writer_lock_path(store);
  auto fd = open_lock_file(path, O_RDWR | O_CREAT);
  if (!fd) return std::unexpected(fd.error());
  if (retry_eintr([&] { return ::flock(fd->get(), LOCK_EX | LOCK_NB); }) != 0) {
    const int error = errno;
    if (error != EWOULDBLOCK) {
      return failure(error_code_of_errno(error),
                     "flock(" + path.string() + ", LOCK_EX): " + std::strerror(error));
    }
    return failure(ErrorCode::unavailable,
                   "the store " + store.string() + " is in use by another " + std::string(role) +
                       " (" + describe(parse(read_text(fd->get())).value_or(LockHolder{})) +
                       "); a store has one at a time: stop that one first, or give this one "
                       "another store");
  }
  const std::string text = "pid " + std::to_string(::getpid()) + "\nhost " + this_host() +
                           "\ncommand " + this_command() + "\n";
  if (::ftruncate(fd->get(), 0) != 0 || retry_eintr([&] {
                                          return ::pwrite(fd->get(), text.data(), text.size(), 0);
                                        }) != static_cast<ssize_t>(text.size())) {
    const int error = errno;
    return failure(error_code_of_errno(error), "cannot write who holds the store's lock to " +
                                                   path.string() + ": " + std::strerror(error));
  }
  return WriterLock(std::move(*fd));
}

std::optional<LockHolder> WriterLock::holder(const std::filesystem::path& store) {
  auto fd = open_lock_file(writer_lock_path(store), O_RDONLY);
  if (!fd || !locked_exclusively(fd->get())) return std::nullopt;
  return parse(read_text(fd->get())).value_or(LockHolder{});
}

}  // namespace forktrial::store
