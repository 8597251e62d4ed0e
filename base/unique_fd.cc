#include "base/unique_fd.h"

#include <string.h>
#include <unistd.h>

namespace forktrial {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    // close() must not be retried on EINTR on Linux: the descriptor is
    // released either way.
    ::close(fd_);
  }
  fd_ = fd;
}

std::string errno_text(int error_number) {
  char buffer[256];
  // GNU strerror_r returns a pointer that may or may not be `buffer`.
  const char* text = ::strerror_r(error_number, buffer, sizeof buffer);
  return text;
}

SystemError::SystemError(const std::string& call, int error_number)
    : Error(error_code_of_errno(error_number), call + ": " + errno_text(error_number)),
      error_number_(error_number) {}

}  // namespace forktrial
