// Helpers shared by the subcommands: how failures reach the user.
//
// A subcommand callback throws `CommandFailed` to end the program with a
// message on stderr and a non-zero exit status; main() catches it. Nothing is
// printed on stdout for a failed command, so scripts never read partial output
// as success.
#pragma once

#include <stdexcept>
#include <string>

#include "base/error.h"

namespace forktrial::tools {

// The exit status of a command given options it cannot run with (what the
// user typed is wrong, and nothing was done).
inline constexpr int kUsageError = 2;

// The exit status of a failure of category `code` (base/error.h):
// kUsageError for invalid_argument (what the user typed is wrong), 1 for
// every other category.
int exit_status_for(ErrorCode code);

// What a user can do about a failure of category `code`, as a sentence, or ""
// when only the message itself can say it.
std::string advice_for(ErrorCode code);

class CommandFailed : public std::runtime_error {
 public:
  explicit CommandFailed(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Ends the program with `code` and no message: the command already printed
// its result (e.g. a trial report whose outcome is not `completed`).
class ExitStatus : public std::exception {
 public:
  explicit ExitStatus(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "exit status"; }

 private:
  int code_;
};

// Formats the footer shared by every subcommand's --help: examples.
std::string examples_footer(std::initializer_list<const char*> lines);

}  // namespace forktrial::tools
