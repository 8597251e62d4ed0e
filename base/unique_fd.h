// Owned file descriptors and errno-reporting syscall helpers.
//
// `UniqueFd` closes its descriptor exactly once, in its destructor; it is
// move-only. `SystemError` carries the failed call with its arguments and
// errno text, e.g. "open(\"/x\", O_RDONLY): No such file or directory".
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/error.h"

namespace forktrial {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A failed system call; its category comes from its errno
// (error_code_of_errno).
class SystemError : public Error {
 public:
  SystemError(const std::string& call, int error_number);
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// Retries `call` while it fails with EINTR; returns its final result.
template <typename Call>
auto retry_eintr(Call&& call) {
  for (;;) {
    auto result = call();
    if (!(result == -1 && errno == EINTR)) return result;
  }
}

// "No such file or directory" for ENOENT, thread-safely.
std::string errno_text(int error_number);

}  // namespace forktrial
