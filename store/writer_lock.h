// The one writer of a store's orchestration: an exclusive flock(2) on
// <store>/writer.lock, held for the life of a WriterLock, with who holds it
// (pid, host, command line) written inside for the next one to name.
//
// A coordinator takes it before it replays its log, and keeps it while it
// runs: two coordinators on one store (a `forktrial batch --store` beside a
// live one, a restart while a batch runs there) would each lease the
// other's trials and write records the other's replay cannot apply. Readers
// (`run ls`, `run events`, export, gc's reading of the log) take no lock and
// keep working beside it; LMDB serializes their writes with the holder's.
//
// The kernel drops the lock with the holder's last descriptor of it, so a
// holder killed by SIGKILL leaves no lock behind; the file stays, and its
// text is overwritten by the next holder. The descriptor is close-on-exec:
// the holder's children (trial children, daemons) never hold it.
//
// Thread-safety: a WriterLock is a move-only value; take() may run on any
// thread. Errors (take): `unavailable` when another process holds the lock,
// naming it and what to do; the category of errno (error_code_of_errno)
// when the directory or the file cannot be made or opened, naming the path.
#pragma once

#include <sys/types.h>

#include <expected>
#include <filesystem>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/unique_fd.h"

namespace forktrial::store {

// Who holds a store's lock, as the holder wrote it.
struct LockHolder {
  pid_t pid = 0;
  std::string host;
  std::string command;  // its command line, arguments joined by spaces
};

// The lock file of the store at `store`.
std::filesystem::path writer_lock_path(const std::filesystem::path& store);

class WriterLock {
 public:
  WriterLock() = default;

  // Takes the lock of the store at `store` (its directory is made when
  // missing), or says who holds it. `role` names what would take it, for
  // the refusal ("coordinator").
  static std::expected<WriterLock, Status> take(const std::filesystem::path& store,
                                                std::string_view role);

  // Who holds the store's lock now; nullopt when no one does (or the store
  // has no lock file). Reads the kernel's table of locks (/proc/locks) and
  // takes no lock, so that it never stands in a take()'s way. Where that
  // table names another inode than the file's own (an overlay filesystem
  // may), no holder is seen; take() still refuses, naming the holder.
  static std::optional<LockHolder> holder(const std::filesystem::path& store);

  bool held() const { return fd_.valid(); }

 private:
  explicit WriterLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// "pid 4242 on host1: forktrial coordinator --store /srv/ft" for messages;
// "a process that has not said which yet" for a holder that wrote no pid.
std::string describe(const LockHolder& holder);

}  // namespace forktrial::store
