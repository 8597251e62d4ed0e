// Test support: a scratch directory removed (recursively) when it goes out of
// scope, and small helpers to build file trees and run commands.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `content` to `relative` (parents created), returns the full path.
  std::filesystem::path write(std::string_view relative, std::string_view content) const;

 private:
  std::filesystem::path path_;
};

// The whole content of `path`; throws naming it if it cannot be read.
std::string read_file(const std::filesystem::path& path);

struct CommandResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `argv[0]` with arguments through posix_spawn (no shell), capturing
// stdout and stderr. A command still running after `timeout` is killed, with
// every process of its own process group, and the call throws naming it, so
// a hung command fails its test instead of hanging the suite.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::seconds timeout = std::chrono::seconds(120));

// Starts `argv[0]` in the background the way a shell starts a command: the
// default dispositions of SIGINT and SIGTERM, stdout to /dev/null, stderr
// to the file `err`, this process's environment with `env` (NAME=value
// entries) in its place where they name the same variable; with
// `own_group`, in a process group of its own, as a foreground job that a
// terminal's Ctrl-C signals whole. Returns its pid; throws when it cannot
// start. The caller reaps it.
pid_t spawn_as_shell(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     const std::filesystem::path& err, bool own_group = false);

// Runs the built `forktrial` command with `args`, as a user would.
CommandResult run_forktrial(std::vector<std::string> args);

// The lines of `text` (command output, a report's detail), without their
// newlines.
std::vector<std::string> lines_of(std::string_view text);

}  // namespace forktrial::testing
