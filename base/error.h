// The error categories every layer of forktrial uses, and the base of every
// exception it throws.
//
// A category says what the caller should do about an error, not where it
// came from, in the spirit of Abseil's status codes: the store, the sandbox,
// the command line and (on the wire) the coordinator all speak these. The
// rule for values and exceptions is in docs/decisions/0037-error-categories.md:
// an outcome a caller is expected to handle is a value carrying a category
// (store::Refusal, pack::PinError); a failure it cannot handle where it
// happens is an exception derived from Error.
//
// Messages say what failed and why, with the values involved; they never say
// which command to run: the command line adds what to do.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

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

// "not_found", "invalid_argument", ... (the names the wire protocol uses).
std::string_view error_code_name(ErrorCode code);

// The category of a failed system call's errno: ENOENT is not_found,
// ENOMEM and ENOSPC resource_exhausted, EACCES and EPERM failed_precondition,
// EAGAIN and EBUSY unavailable, anything else internal.
ErrorCode error_code_of_errno(int error_number);

// An outcome a caller is expected to handle, as a value: what the caller
// should do about it (its category) and what was refused and why, with the
// values involved. The scheduler's and the worker cache's refusals are
// these; the store's (store::Refusal) names a finer kind and gives its
// category (code()).
struct Refusal {
  ErrorCode code;
  std::string message;
  friend bool operator==(const Refusal&, const Refusal&) = default;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace forktrial
