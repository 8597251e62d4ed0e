// A power loss, for tests: an LD_PRELOAD library that keeps, for one file,
// an undo log of every write made since that file was last flushed
// (fsync/fdatasync), so that after the process is killed the test can drop
// what was never synced (tests/support/power_loss.h) and reopen, as
// LevelDB's fault-injection environment does.
//
//   FORKTRIAL_TEST_UNSYNCED_FILE  the file to watch (its path as
//                                 /proc/self/fd shows it)
//   FORKTRIAL_TEST_UNDO_LOG       the undo log, created if needed
//
// Each write to the watched file (pwrite, pwrite64, write, writev) appends
// one entry before it happens: offset u64, the file's size before u64,
// length u64, then the bytes it overwrites (those before the old end of the
// file). A flush of the file empties the log: everything before it is on
// disk. Other files pass through untouched.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using WritevFn = ssize_t (*)(int, const struct iovec*, int);
using SyncFn = int (*)(int);

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

std::mutex lock;

bool watched(int fd) {
  static const char* const file = std::getenv("FORKTRIAL_TEST_UNSYNCED_FILE");
  if (file == nullptr) return false;
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[4096];
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strcmp(target, file) == 0;
}

void append_raw(const void* bytes, std::size_t size) {
  static const char* const path = std::getenv("FORKTRIAL_TEST_UNDO_LOG");
  if (path == nullptr) return;
  const int log = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) std::abort();
  static const WriteFn real_write = next<WriteFn>("write");
  const char* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t n = real_write(log, p, size);
    if (n <= 0) std::abort();
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  ::close(log);
}

// Records what a write of `length` bytes at `offset` of `fd` overwrites.
void remember(int fd, off_t offset, std::size_t length) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) std::abort();
  const auto old_size = static_cast<std::uint64_t>(st.st_size);
  const auto at = static_cast<std::uint64_t>(offset);
  std::vector<char> before;
  if (at < old_size) {
    before.resize(static_cast<std::size_t>(std::min<std::uint64_t>(length, old_size - at)));
    if (::pread(fd, before.data(), before.size(), offset) != static_cast<ssize_t>(before.size()))
      std::abort();
  }
  const std::uint64_t header[3] = {at, old_size, before.size()};
  append_raw(header, sizeof header);
  append_raw(before.data(), before.size());
}

void forget_all() {
  static const char* const path = std::getenv("FORKTRIAL_TEST_UNDO_LOG");
  if (path != nullptr) ::truncate(path, 0);
}

}  // namespace

extern "C" {

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  static const PwriteFn real = next<PwriteFn>("pwrite");
  if (watched(fd)) {
    std::lock_guard guard(lock);
    remember(fd, offset, n);
    return real(fd, buf, n, offset);
  }
  return real(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t offset) {
  static const PwriteFn real = next<PwriteFn>("pwrite64");
  if (watched(fd)) {
    std::lock_guard guard(lock);
    remember(fd, offset, n);
    return real(fd, buf, n, offset);
  }
  return real(fd, buf, n, offset);
}

ssize_t write(int fd, const void* buf, size_t n) {
  static const WriteFn real = next<WriteFn>("write");
  if (watched(fd)) {
    std::lock_guard guard(lock);
    remember(fd, ::lseek(fd, 0, SEEK_CUR), n);
    return real(fd, buf, n);
  }
  return real(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static const WritevFn real = next<WritevFn>("writev");
  if (watched(fd)) {
    std::lock_guard guard(lock);
    std::size_t total = 0;
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    remember(fd, ::lseek(fd, 0, SEEK_CUR), total);
    return real(fd, iov, count);
  }
  return real(fd, iov, count);
}

int fdatasync(int fd) {
  static const SyncFn real = next<SyncFn>("fdatasync");
  const int result = real(fd);
  if (result == 0 && watched(fd)) {
    std::lock_guard guard(lock);
    forget_all();
  }
  return result;
}

int fsync(int fd) {
  static const SyncFn real = next<SyncFn>("fsync");
  const int result = real(fd);
  if (result == 0 && watched(fd)) {
    std::lock_guard guard(lock);
    forget_all();
  }
  return result;
}

}  // extern "C"
