// The `forktrial` front end: it runs the coordinator's clients itself, and
// hands every other command to forktrial-full, which it finds beside itself
// in a build tree (docs/decisions/0085-a-lean-front-end-for-the-client-commands.md).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using forktrial::testing::CommandResult;
using forktrial::testing::run_command;
using forktrial::testing::TempDir;

// The commands the front end runs itself.
const std::vector<std::string> kClientCommands = {"keygen", "submit",  "status",  "wait",
                                                  "cancel", "results", "workers", "import"};

fs::path full_program() {
  return fs::path(FORKTRIAL_BINARY).parent_path() / "forktrial-full";
}

// What forktrial-full printed, as `forktrial` would have: CLI11 names the
// program in its usage lines by its argv[0], the path it was run by.
std::string as_front_end(std::string text) {
  const std::string full = full_program().string();
  for (auto at = text.find(full); at != std::string::npos; at = text.find(full, at)) {
    text.replace(at, full.size(), FORKTRIAL_BINARY);
  }
  return text;
}

void check_same(const CommandResult& front_end, const CommandResult& full) {
  CHECK(front_end.exit_code == full.exit_code);
  CHECK(front_end.out == as_front_end(full.out));
  CHECK(front_end.err == as_front_end(full.err));
}

}  // namespace

TEST_CASE("the front end gives each client command the help and usage errors forktrial-full gives",
          "[cli][front_end]") {
  for (const std::string& command : kClientCommands) {
    INFO(command);
    const auto help = run_command({FORKTRIAL_BINARY, command, "--help"});
    CHECK(help.exit_code == 0);
    CHECK(help.out.find("Usage: " FORKTRIAL_BINARY " " + command) != std::string::npos);
    check_same(help, run_command({full_program().string(), command, "--help"}));
    check_same(run_command({FORKTRIAL_BINARY, command, "--no-such-option"}),
               run_command({full_program().string(), command, "--no-such-option"}));
  }
}

TEST_CASE("the front end hands the whole help and every other command to forktrial-full",
          "[cli][front_end]") {
  const auto help = run_command({FORKTRIAL_BINARY, "--help"});
  CHECK(help.exit_code == 0);
  for (const char* command : {"pack", "run", "trial", "coordinator", "worker", "batch", "gc"}) {
    CHECK(help.out.find(std::string("\n  ") + command + " ") != std::string::npos);
  }
  for (const std::string& command : kClientCommands) {
    CHECK(help.out.find("\n  " + command + " ") != std::string::npos);
  }
  check_same(help, run_command({full_program().string(), "--help"}));
  check_same(run_command({FORKTRIAL_BINARY}), run_command({full_program().string()}));
  // A command of forktrial-full's, its arguments passed on unchanged.
  const auto hash = run_command(
      {FORKTRIAL_BINARY, "pack", "hash", FORKTRIAL_SOURCE_DIR "/examples/packs/greeter"});
  CHECK(hash.exit_code == 0);
  CHECK(hash.out.starts_with("sha256:"));
  check_same(hash, run_command({full_program().string(), "pack", "hash",
                                FORKTRIAL_SOURCE_DIR "/examples/packs/greeter"}));
}

TEST_CASE("the front end alone runs the client commands and says where forktrial-full belongs",
          "[cli][front_end]") {
  TempDir dir;
  const fs::path alone = dir.path() / "bin" / "forktrial";
  fs::create_directories(alone.parent_path());
  fs::copy_file(FORKTRIAL_BINARY, alone);
  for (const std::string& command : kClientCommands) {
    INFO(command);
    CHECK(run_command({alone.string(), command, "--help"}).exit_code == 0);
  }
  CHECK(run_command({alone.string(), "--version"}).exit_code == 0);
  const auto missing = run_command({alone.string(), "run", "ls"});
  CHECK(missing.exit_code == 127);
  CHECK(missing.out.empty());
  // Where it looked, from the path the kernel gives for it (no "..", no link).
  const std::string looked =
      (fs::canonical(dir.path()) / "libexec" / "forktrial" / "forktrial-full").string();
  CHECK(missing.err == "forktrial: execv(" + looked +
                           "): No such file or directory\nevery command but the coordinator's "
                           "clients is forktrial-full's, which is installed in "
                           "../libexec/forktrial/ from forktrial's directory, or beside "
                           "forktrial: install forktrial again\n");
}
