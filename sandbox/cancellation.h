// Stopping a running trial from outside the thread that runs it, including
// from a signal handler.
//
// A Cancellation is a one-way flag paired with a descriptor that becomes
// readable once the flag is set. run_child sleeps in poll() on that
// descriptor beside the child's, so it wakes at once whichever thread a signal
// handler ran on and however the signal raced with its own checks (a flag
// alone would be noticed only at the next wake-up, possibly the wall clock).
//
// cancel() is async-signal-safe and may be called from any thread, any number
// of times; a Cancellation stays cancelled. The descriptor is close-on-exec
// and is never passed to a child. One Cancellation may serve several trials
// at once: cancelling it stops them all.
//
// Errors: the constructor throws SystemError when eventfd fails.
#pragma once

#include <atomic>
#include <stdexcept>

#include "base/error.h"
#include "base/unique_fd.h"

namespace forktrial::sandbox {

class Cancellation {
 public:
  Cancellation();  // eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Sets the flag and makes fd() readable; async-signal-safe, keeps errno.
  void cancel() noexcept;
  bool cancelled() const noexcept { return flag_.load(); }
  // Readable once cancelled; poll it for POLLIN, never read it.
  int fd() const noexcept { return fd_.get(); }

 private:
  static_assert(std::atomic<bool>::is_always_lock_free, "cancel() runs in signal handlers");
  std::atomic<bool> flag_{false};
  UniqueFd fd_;
};

// What run_child throws when its Cancellation is set before or while it runs
// a child. By then the child's whole process group has been killed and the
// child reaped, so the caller's destructors can remove what the child used.
// Category cancelled (base/error.h).
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& message) : Error(ErrorCode::cancelled, message) {}
};

}  // namespace forktrial::sandbox
