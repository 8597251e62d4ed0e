// Test support: a scratch directory removed (recursively) when it goes out of
// scope, and small helpers to build file trees and run commands.
#pragma once

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

// Runs the built `forktrial` command with `args`, as a user would.
CommandResult run_forktrial(std::vector<std::string> args);

// The lines of `text` (command output, a report's detail), without their
// newlines.
std::vector<std::string> lines_of(std::string_view text);

}  // namespace forktrial::testing
