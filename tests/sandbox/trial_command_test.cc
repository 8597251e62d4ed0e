// `forktrial trial` and `forktrial preflight` as a user runs them.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using forktrial::testing::run_command;
using forktrial::testing::TempDir;

namespace {

const std::string kExamples = FORKTRIAL_SOURCE_DIR "/examples";

forktrial::testing::CommandResult cli(std::vector<std::string> args) {
  return forktrial::testing::run_forktrial(std::move(args));
}

std::string imported_store(const TempDir& dir) {
  const std::string store = (dir.path() / "store").string();
  auto imported =
      cli({"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id", "run_chat"});
  REQUIRE(imported.exit_code == 0);
  return store;
}

}  // namespace

TEST_CASE("forktrial trial prints a completed report and exits 0", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto pin = cli({"pack", "hash", kExamples + "/packs/chat_echo"});
  REQUIRE(pin.exit_code == 0);
  pin.out.pop_back();
  auto result = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_010", "--pack",
                     kExamples + "/packs/chat_echo", "--expect", pin.out, "--scenario",
                     "scenarios/replay.lua", "--json"});
  INFO(result.err);
  CHECK(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["outcome"] == "completed");
  CHECK(report["events_appended"].get<int>() > 0);
  auto events = cli({"run", "events", report["fork_run_id"], "--store", store, "--json"});
  CHECK(events.exit_code == 0);
  CHECK(events.out.find("trial.replay") != std::string::npos);
}

TEST_CASE("forktrial trial exits with the outcome's code when not completed", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto wrong = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_010", "--pack",
                    kExamples + "/packs/greeter", "--expect", "sha256:" + std::string(64, '1')});
  CHECK(wrong.exit_code == 50);
  CHECK(wrong.out.find("materialization_failed") != std::string::npos);
  CHECK(wrong.out.find("bundle hash mismatch") != std::string::npos);

  auto runaway = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_010", "--pack",
                      kExamples + "/candidates/runaway", "--scenario", "scenarios/start.lua",
                      "--max-events", "30", "--json"});
  CHECK(runaway.exit_code == 40);
  CHECK(nlohmann::json::parse(runaway.out)["outcome"] == "limits_exceeded");
}

TEST_CASE("forktrial trial refuses bad input with what to do", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto no_run = cli({"trial", "--store", store, "--run", "run_nope", "--at", "evt_001", "--pack",
                     kExamples + "/packs/greeter"});
  CHECK(no_run.exit_code == 1);
  CHECK(no_run.out.empty());
  CHECK(no_run.err.find("cannot start the trial") != std::string::npos);
  CHECK(no_run.err.find("run_nope") != std::string::npos);

  auto bad_size = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_001", "--pack",
                       kExamples + "/packs/greeter", "--max-rss", "lots"});
  CHECK(bad_size.exit_code == 1);
  CHECK(bad_size.err.find("--max-rss lots: not a size") != std::string::npos);

  auto no_store = cli({"trial", "--store", (dir.path() / "none").string(), "--run", "r", "--at",
                       "e", "--pack", kExamples + "/packs/greeter"});
  CHECK(no_store.exit_code == 1);
  CHECK(no_store.err.find("no store at") != std::string::npos);
}

TEST_CASE("forktrial preflight reports that children start here", "[trial][cli]") {
  auto result = cli({"preflight", "--json"});
  CHECK(result.exit_code == 0);
  auto parsed = nlohmann::json::parse(result.out);
  CHECK(parsed["ok"] == true);
  for (auto args : {std::vector<std::string>{"trial", "--help"}, {"preflight", "--help"}}) {
    CHECK(cli(args).out.find("Examples:") != std::string::npos);
  }
}

namespace {

// The pids of running forktrial-child processes whose parent is `parent`.
std::vector<int> children_of(int parent) {
  std::vector<int> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces, so parse after ')'.
    auto close = line.rfind(')');
    auto open = line.find('(');
    if (close == std::string::npos || open == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && line.substr(open + 1, close - open - 1) == "forktrial-child") {
      found.push_back(std::stoi(name));
    }
  }
  return found;
}

}  // namespace

TEST_CASE("a trial child dies with the forktrial process that supervises it", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  // forktrial runs a spinning candidate under a long wall clock (the CPU and
  // memory nets bound it should the test fail), in the background; it is then
  // killed outright, before it can kill its child.
  forktrial::testing::PackSpec spinner;
  spinner.pack_lua = forktrial::testing::pack_header(spinner) + "return pack\n";
  spinner.files["spin.lua"] = "function main(rt) while true do end end\n";
  const auto pack = forktrial::testing::write_pack(dir, "spinner", spinner);
  const std::string script = std::string("exec ") + FORKTRIAL_BINARY + " trial --store " + store +
                             " --run run_chat --at evt_010 --pack " + pack.string() +
                             " --scenario spin.lua --wall-clock 600 --max-cpu 30 --max-rss 256M";
  pid_t cli_pid = 0;
  {
    std::vector<std::string> argv = {"/bin/sh", "-c", script};
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    REQUIRE(::posix_spawn(&cli_pid, "/bin/sh", nullptr, nullptr, args.data(), environ) == 0);
  }
  struct KillOnExit {  // a failed REQUIRE must not leave the trial running
    pid_t pid;
    ~KillOnExit() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } guard{cli_pid};
  std::vector<int> children;
  for (int i = 0; i < 400 && children.empty(); ++i) {  // up to 10 s
    ::usleep(25'000);
    children = children_of(cli_pid);
  }
  REQUIRE(children.size() == 1);
  ::kill(cli_pid, SIGKILL);
  ::waitpid(cli_pid, nullptr, 0);
  guard.pid = 0;
  bool gone = false;
  for (int i = 0; i < 400 && !gone; ++i) {
    gone = ::kill(children[0], 0) != 0;
    if (!gone) ::usleep(25'000);
  }
  CHECK(gone);
}

TEST_CASE("forktrial trial reports hostile error text safely, as JSON and as text",
          "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  forktrial::testing::PackSpec spec;
  spec.pack_lua = forktrial::testing::pack_header(spec) + "return pack\n";
  spec.files["main.lua"] =
      "function main(rt)\n"
      "  error('\\27[2K\\r\\27[1Aoutcome            completed\\n\\194\\155 \\255 end')\n"
      "end\n";
  const auto pack = forktrial::testing::write_pack(dir, "hostile", spec);
  const std::vector<std::string> args = {"trial",    "--store",    store,     "--run",
                                         "run_chat", "--at",       "evt_010", "--pack",
                                         pack,       "--scenario", "main.lua"};

  auto with_json = args;
  with_json.push_back("--json");
  auto json = cli(with_json);
  INFO(json.err);
  CHECK(json.exit_code == 30);
  auto report = nlohmann::json::parse(json.out);
  CHECK(report["outcome"] == "scenario_failed");
  CHECK(report["detail"].get<std::string>().find("\x1b[1Aoutcome            completed\n"
                                                 "\xC2\x9B \xEF\xBF\xBD end") != std::string::npos);

  auto text = cli(args);
  CHECK(text.exit_code == 30);
  CHECK(text.out.find_first_of("\x1b\r") == std::string::npos);
  CHECK(text.out.find("\xC2\x9B") == std::string::npos);
  int outcome_lines = 0;
  for (const auto& line : forktrial::testing::lines_of(text.out)) {
    if (line.starts_with("outcome")) {
      ++outcome_lines;
      CHECK(line == "outcome            scenario_failed");
    }
  }
  CHECK(outcome_lines == 1);
  // The detail keeps its line structure; each line is escaped and indented.
  CHECK(text.out.find("detail\n  main.lua:2: \\x1b[2K\\r\\x1b[1Aoutcome            completed\n"
                      "  \\u{9b} \xEF\xBF\xBD end\n") != std::string::npos);
}

TEST_CASE("forktrial trial refuses a label that is not plain text before running anything",
          "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto result = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_010", "--pack",
                     kExamples + "/packs/greeter", "--label", "\x1b[2J\x1b[Hforged"});
  CHECK(result.exit_code == 1);
  CHECK(result.out.empty());
  CHECK(result.err.find('\x1b') == std::string::npos);
  CHECK(result.err.find("--label: label \"\\x1b[2J\\x1b[Hforged\" contains the control character "
                        "U+001B at offset 0") != std::string::npos);
  auto runs = nlohmann::json::parse(cli({"run", "ls", "--store", store, "--json"}).out);
  CHECK(runs.size() == 1);
}
