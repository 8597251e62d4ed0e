#include "sandbox/cancellation.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace forktrial::sandbox {

Cancellation::Cancellation() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_) throw SystemError("eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)", errno);
}

void Cancellation::cancel() noexcept {
  const int saved = errno;  // a signal handler must not change the errno it interrupted
  flag_.store(true);
  const std::uint64_t one = 1;
  // The counter cannot reach its maximum in practice; EAGAIN would leave it
  // readable anyway, and nothing else can fail on a valid eventfd.
  [[maybe_unused]] const ssize_t written = ::write(fd_.get(), &one, sizeof one);
  errno = saved;
}

}  // namespace forktrial::sandbox
