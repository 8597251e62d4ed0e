// The error categories every layer of forktrial uses, and the base of every
// exception it throws.
//
// A category says what the caller should do about an error, not where it
// came from, in the spirit of Abseil's status codes: the store, the sandbox,
// the command line and (on the wire) the coordinator all speak these. The
// rule for values and exceptions is in docs/decisions/0037-error-categories.md
// and 0080-one-status-type.md: an outcome a caller is expected to handle is a
// Status value (std::expected<T, Status>), or a type derived from Status that
// adds a detail (store::Refusal's finer kind, pack::PinError's actual hash);
// a failure it cannot handle where it happens is an exception derived from
// Error. On the wire an error carries the same category, one to one
// (schema/wire.capnp ErrorCode).
//
// Messages say what failed and why, with the values involved; they never say
// which command to run: the command line adds what to do.
#pragma once

#include <array>
#include <expected>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial {

enum class ErrorCode {
  not_found,            // what was named does not exist: a run, an event, a file
  invalid_argument,     // what was given is malformed or out of range, whatever the state
  failed_precondition,  // well-formed, but the state does not allow it: a pin that does not
                        // match, a store of another schema version
  conflict,             // another writer got there first: a moved head, a taken id; re-read
                        // and retry
  resource_exhausted,   // a limit or a capacity ran out: a full store, no memory
  unavailable,          // something needed cannot be started or reached now; retrying may help
  cancelled,            // the caller asked to stop
  internal,             // a broken invariant or host: corruption, an unexpected system error
};

// Every category, in declaration order (the wire's ordinals).
inline constexpr std::array kErrorCodes = {
    ErrorCode::not_found,           ErrorCode::invalid_argument,
    ErrorCode::failed_precondition, ErrorCode::conflict,
    ErrorCode::resource_exhausted,  ErrorCode::unavailable,
    ErrorCode::cancelled,           ErrorCode::internal};

// "not_found", "invalid_argument", ...: the names the command line prints and
// the daemons' metrics count errors under ("unknown" for a value out of range).
std::string_view error_code_name(ErrorCode code);

// The category of a failed system call's errno: ENOENT is not_found,
// ENOMEM and ENOSPC resource_exhausted, EACCES and EPERM failed_precondition,
// EAGAIN and EBUSY unavailable, anything else internal.
ErrorCode error_code_of_errno(int error_number);

// An outcome a caller is expected to handle, as a value: what the caller
// should do about it (its category) and what failed or was refused and why,
// with the values involved. Every std::expected of a public API carries one
// (or a type derived from it), and an error on the wire is one.
struct Status {
  ErrorCode code = ErrorCode::internal;
  std::string message;
  friend bool operator==(const Status&, const Status&) = default;
};

// A Status (invalid_argument) listing every problem found at once, each a
// complete sentence naming what it is about; the message is the list, one
// per line.
struct Problems : Status {
  std::vector<std::string> list;  // never empty

  explicit Problems(std::vector<std::string> found);
};

// "invalid_argument: the message": for logs and tests.
std::string to_string(const Status& status);
std::ostream& operator<<(std::ostream& out, const Status& status);

// The failed result of a std::expected<T, Status>:
// `return failure(ErrorCode::not_found, "no run " + id);`.
inline std::unexpected<Status> failure(ErrorCode code, std::string message) {
  return std::unexpected(Status{code, std::move(message)});
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit Error(const Status& status) : Error(status.code, status.message) {}
  ErrorCode code() const { return code_; }
  Status status() const { return {code_, what()}; }

 private:
  ErrorCode code_;
};

}  // namespace forktrial
