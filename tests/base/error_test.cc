// The error categories every layer shares.
#include "base/error.h"

#include <catch2/catch.hpp>
#include <cerrno>

#include "base/unique_fd.h"

using forktrial::ErrorCode;

TEST_CASE("every category has the name the wire protocol uses", "[base][error]") {
  CHECK(forktrial::error_code_name(ErrorCode::not_found) == "not_found");
  CHECK(forktrial::error_code_name(ErrorCode::invalid_argument) == "invalid_argument");
  CHECK(forktrial::error_code_name(ErrorCode::failed_precondition) == "failed_precondition");
  CHECK(forktrial::error_code_name(ErrorCode::conflict) == "conflict");
  CHECK(forktrial::error_code_name(ErrorCode::resource_exhausted) == "resource_exhausted");
  CHECK(forktrial::error_code_name(ErrorCode::unavailable) == "unavailable");
  CHECK(forktrial::error_code_name(ErrorCode::cancelled) == "cancelled");
  CHECK(forktrial::error_code_name(ErrorCode::internal) == "internal");
}

TEST_CASE("a failed system call is categorized by its errno", "[base][error]") {
  CHECK(forktrial::SystemError("open(\"/x\")", ENOENT).code() == ErrorCode::not_found);
  CHECK(forktrial::SystemError("mmap", ENOMEM).code() == ErrorCode::resource_exhausted);
  CHECK(forktrial::SystemError("write", ENOSPC).code() == ErrorCode::resource_exhausted);
  CHECK(forktrial::SystemError("open", EACCES).code() == ErrorCode::failed_precondition);
  CHECK(forktrial::SystemError("flock", EAGAIN).code() == ErrorCode::unavailable);
  CHECK(forktrial::SystemError("read", EIO).code() == ErrorCode::internal);
  const forktrial::Error& as_error = forktrial::SystemError("open(\"/x\")", ENOENT);
  CHECK(std::string(as_error.what()) == "open(\"/x\"): No such file or directory");
}

TEST_CASE("a status reads as its category and message", "[base][error]") {
  const forktrial::Status status{ErrorCode::not_found, "no run r1"};
  CHECK(forktrial::to_string(status) == "not_found: no run r1");
  CHECK(forktrial::error_code_name(static_cast<ErrorCode>(200)) == "unknown");
  CHECK(forktrial::Error(status).status() == status);
  REQUIRE(forktrial::kErrorCodes.size() == 8);
  for (std::size_t i = 0; i < forktrial::kErrorCodes.size(); ++i) {
    CHECK(static_cast<std::size_t>(forktrial::kErrorCodes[i]) == i);
  }
}
