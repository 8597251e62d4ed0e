// The README's walkthrough, run as written: every `$ command` line of its
// code blocks, in order, through /bin/sh from the source root, with the built
// `forktrial` first on PATH and a temporary store. A command must exit 0,
// unless its comment says "(exit N)". FORK_RUN stands for the fork run the
// last `forktrial trial` printed.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"

namespace {

struct Command {
  std::string text;
  int expected_exit = 0;
};

std::vector<Command> walkthrough_commands(const std::string& readme) {
  const auto start = readme.find("\n## Walkthrough");
  REQUIRE(start != std::string::npos);
  const auto end = readme.find("\n## ", start + 1);
  std::istringstream in(readme.substr(start, end - start));
  std::vector<Command> commands;
  bool continued = false;
  for (std::string line; std::getline(in, line);) {
    if (continued) {
      commands.back().text += " " + line.substr(line.find_first_not_of(' '));
    } else if (line.starts_with("    $ ")) {
      commands.push_back({line.substr(6)});
    } else {
      continue;
    }
    std::string& text = commands.back().text;
    continued = text.ends_with("\\");
    if (continued) text.pop_back();
    const auto exit_note = text.find("(exit ");
    if (exit_note != std::string::npos) {
      commands.back().expected_exit = std::stoi(text.substr(exit_note + 6));
    }
  }
  return commands;
}

std::string fork_run_of(const std::string& trial_output) {
  const auto at = trial_output.find("fork run");
  if (at == std::string::npos) return "";
  std::istringstream line(trial_output.substr(at + 8));
  std::string id;
  line >> id;
  return id;
}

}  // namespace

TEST_CASE("the README walkthrough runs as written", "[readme][cli][release-only]") {
  std::ifstream file(std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "README.md");
  std::stringstream readme;
  readme << file.rdbuf();
  const auto commands = walkthrough_commands(readme.str());
  REQUIRE(commands.size() >= 10);

  forktrial::testing::TempDir dir;
  const std::string tools = std::filesystem::path(FORKTRIAL_BINARY).parent_path().string();
  const std::string prefix = "cd '" FORKTRIAL_SOURCE_DIR "' && PATH='" + tools +
                             "':\"$PATH\" FORKTRIAL_STORE='" + (dir.path() / "store").string() +
                             "' && export PATH FORKTRIAL_STORE && ";
  std::string fork_run;
  for (const auto& command : commands) {
    std::string text = command.text;
    if (const auto at = text.find("FORK_RUN"); at != std::string::npos) {
      REQUIRE_FALSE(fork_run.empty());
      text.replace(at, 8, fork_run);
    }
    auto result = forktrial::testing::run_command({"/bin/sh", "-c", prefix + text});
    INFO("command: " << text << "\nstdout: " << result.out << "\nstderr: " << result.err);
    CHECK(result.exit_code == command.expected_exit);
    if (text.starts_with("forktrial trial")) fork_run = fork_run_of(result.out);
  }
}
