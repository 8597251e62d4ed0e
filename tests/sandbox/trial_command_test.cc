// `forktrial trial` and `forktrial preflight` as a user runs them.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/unique_fd.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "tests/sandbox/dir_listing.h"
#include "tests/sandbox/trial_fixture.h"
#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using forktrial::UniqueFd;
using forktrial::testing::names_in;
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

// chat_echo's replay scenario, pinned, on a fork of run_chat at its last
// event, with `extra` options.
forktrial::testing::CommandResult chat_echo_trial(const std::string& store,
                                                  std::vector<std::string> extra = {}) {
  auto pin = cli({"pack", "hash", kExamples + "/packs/chat_echo"});
  REQUIRE(pin.exit_code == 0);
  pin.out.pop_back();
  std::vector<std::string> args{"trial",
                                "--store",
                                store,
                                "--run",
                                "run_chat",
                                "--at",
                                "evt_031",
                                "--pack",
                                kExamples + "/packs/chat_echo",
                                "--expect",
                                pin.out,
                                "--scenario",
                                "scenarios/replay.lua",
                                "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return cli(std::move(args));
}

}  // namespace

TEST_CASE("forktrial trial prints a completed report and exits 0", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto result = chat_echo_trial(store);
  INFO(result.err);
  CHECK(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["outcome"] == "completed");
  CHECK(report["events_appended"].get<int>() > 0);
  auto events = cli({"run", "events", report["fork_run_id"], "--store", store, "--json"});
  CHECK(events.exit_code == 0);
  CHECK(events.out.find("trial.replay") != std::string::npos);
}

TEST_CASE("run export of a trial's fork keeps activegraph's payload key order and time form",
          "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto result =
      cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_031", "--pack",
           kExamples + "/packs/chat_echo", "--scenario", "scenarios/replay.lua", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  const std::string fork = report["fork_run_id"];
  // The report says which isolation the trial had, net by net.
  CHECK(report["isolation"]["level"] == "standard");
  CHECK(report["executor"] == nlohmann::json{{"name", "lua"}, {"version", ""}});
  REQUIRE(report["isolation"]["nets"].size() == 11);
  CHECK(report["isolation"]["nets"][0] ==
        nlohmann::json{{"name", "process"},
                       {"state", "applied"},
                       {"detail", "a fresh child process per trial, in its own process group"}});
  CHECK(report["isolation"]["nets"][6]["name"] == "namespaces");
  CHECK(report["isolation"]["nets"][6]["state"] == "off");
  auto exported = cli({"run", "export", fork, "--store", store});
  REQUIRE(exported.exit_code == 0);
  // The lines the trial wrote, after the fork point (evt_031).
  std::istringstream lines(exported.out);
  std::map<std::string, std::string> first_of_type;
  std::size_t written = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto event = nlohmann::ordered_json::parse(line);
    if (event["id"].get<std::string>() <= "evt_031") continue;
    ++written;
    INFO(line);
    // activegraph's Clock form: seconds and Z.
    const std::string timestamp = event["timestamp"];
    REQUIRE(timestamp.size() == 20);
    REQUIRE(timestamp.ends_with("Z"));
    first_of_type.emplace(event["type"], line);
  }
  REQUIRE(written > 0);
  // Keys in the order activegraph's builders insert them, not sorted.
  const auto has = [&](const std::string& type, const std::string& text) {
    INFO(type << ": " << first_of_type[type]);
    REQUIRE(first_of_type[type].find(text) != std::string::npos);
  };
  has("object.created", R"("payload": {"object": {"id": "reply#)");
  has("object.created",
      R"(, "version": 1, "provenance": {"created_by": "chat_echo.echo", "caused_by_event": )");
  has("relation.created", R"("payload": {"relation": {"id": "rel_)");
  has("behavior.started", R"("payload": {"behavior": "chat_echo.echo", "event_id": ")");
  has("behavior.completed", R"(, "objects_created": 1, "relations_created": 1, )"
                            R"("patches_applied": 0, "patches_proposed": 0, "events_emitted": 0})");
  has("runtime.idle", R"("payload": {"snapshot": {"used": {"max_events": )");
  has("pack.loaded", R"("payload": {"name": "chat_echo", "version": )");
}

TEST_CASE(
    "behavior failures count the inherited prefix as activegraph does, and apart after the fork",
    "[trial][cli]") {
  // chat.jsonl holds one behavior.failed (evt_024, a message without text)
  // before the fork point evt_031; the replay fails on that message again.
  // activegraph reports 2 for this fork: the whole log counts.
  TempDir dir;
  const auto store = imported_store(dir);
  const std::vector<std::string> trial = {"trial",
                                          "--store",
                                          store,
                                          "--run",
                                          "run_chat",
                                          "--at",
                                          "evt_031",
                                          "--pack",
                                          kExamples + "/packs/chat_echo",
                                          "--scenario",
                                          "scenarios/replay.lua"};
  auto as_json = trial;
  as_json.push_back("--json");
  auto result = cli(as_json);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["behavior_failures"] == 2);
  CHECK(report["behavior_failures_after_fork"] == 1);

  auto text = cli(trial);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("behavior failures  2 (1 after the fork point)\n") != std::string::npos);
}

TEST_CASE("forktrial trial --spec runs activegraph's TrialSpecification JSON", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  const auto spec = dir.write("spec.json", R"({"at_event":"evt_031","extra_packs":[],)"
                                           R"("label":"from-activegraph","limits":{)"
                                           R"("env_passthrough":[],"max_events":2000,)"
                                           R"("max_llm_calls":0,"max_rss_bytes":null,)"
                                           R"("wall_clock_seconds":120.0},"pack_source":{)"
                                           R"("expected_bundle_hash":"","manifest_required":true,)"
                                           R"("root_dir":")" +
                                               kExamples +
                                               R"(/packs/chat_echo"},)"
                                               R"("parent_run_id":"run_chat",)"
                                               R"("scenario":"scenarios/replay.lua",)"
                                               R"("schema_version":1,"store_path":"/srv/ag.db"})");
  auto result = cli({"trial", "--store", store, "--spec", spec.string(), "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["outcome"] == "completed");
  CHECK(result.err.find("store_path \"/srv/ag.db\" is ignored; the trial runs against the store "
                        "given by --store") != std::string::npos);
  auto runs = nlohmann::json::parse(cli({"run", "ls", "--store", store, "--json", "--all"}).out);
  bool labelled = false;
  for (const auto& run : runs) labelled = labelled || run["label"] == "from-activegraph";
  CHECK(labelled);

  auto mixed = cli({"trial", "--store", store, "--spec", spec.string(), "--run", "run_chat"});
  CHECK(mixed.exit_code == 2);
  CHECK(mixed.err.find("--spec gives the whole trial; --run cannot be combined with it") !=
        std::string::npos);
  auto neither = cli({"trial", "--store", store, "--at", "evt_031"});
  CHECK(neither.exit_code == 2);
  CHECK(neither.err.find("--run, --pack required (or give the whole trial with --spec FILE)") !=
        std::string::npos);
  const auto unknown =
      dir.write("unknown.json", R"({"schema_version":1,"parent_run_id":"run_chat",)"
                                R"("at_event":"evt_031","pack_source":{)"
                                R"("root_dir":"/p"},"priority":3})");
  auto refused = cli({"trial", "--store", store, "--spec", unknown.string()});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("priority: unknown field") != std::string::npos);
}

TEST_CASE("forktrial trial exits with the outcome's code when not completed", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  auto wrong = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_031", "--pack",
                    kExamples + "/packs/greeter", "--expect", "sha256:" + std::string(64, '1')});
  CHECK(wrong.exit_code == 50);
  CHECK(wrong.out.find("materialization_failed") != std::string::npos);
  CHECK(wrong.out.find("bundle hash mismatch") != std::string::npos);

  auto runaway = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_031", "--pack",
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
  CHECK(bad_size.exit_code == 2);
  CHECK(bad_size.err.find("--max-rss: \"lots\" is not a size") != std::string::npos);

  // A cap an activegraph pack may have, below what the Lua child runs in.
  auto small = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_001", "--pack",
                    kExamples + "/packs/greeter", "--max-rss", "32M"});
  CHECK(small.exit_code == 2);
  CHECK_THAT(small.err, Catch::Contains("33554432 bytes is below the 67108864 (64 MiB) "
                                        "forktrial's Lua child runs in"));

  auto no_store = cli({"trial", "--store", (dir.path() / "none").string(), "--run", "r", "--at",
                       "e", "--pack", kExamples + "/packs/greeter"});
  CHECK(no_store.exit_code == 1);
  CHECK(no_store.err.find("no store at") != std::string::npos);
}

TEST_CASE("a malformed pin or limit is a usage error and records nothing", "[trial][cli]") {
  TempDir dir;
  const auto store = imported_store(dir);
  const auto runs = [&] { return cli({"run", "ls", "--store", store, "--json", "--all"}).out; };
  const auto before = runs();
  const std::vector<std::string> trial = {"trial",   "--store",  store,
                                          "--run",   "run_chat", "--at",
                                          "evt_031", "--pack",   kExamples + "/packs/chat_echo"};
  const auto with = [&](std::vector<std::string> extra) {
    auto args = trial;
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  };
  // A pin shortened the way prose abbreviates it.
  auto short_pin = with({"--expect", "sha256:042ff759"});
  CHECK(short_pin.exit_code == 2);
  CHECK(short_pin.out.empty());
  CHECK(short_pin.err.find("--expect: malformed bundle pin \"sha256:042ff759\"") !=
        std::string::npos);
  CHECK(short_pin.err.find("nothing was forked or recorded") != std::string::npos);
  for (const char* wall : {"inf", "nan", "-1", "1e300", "1e-9"}) {
    auto bad_wall = with({"--wall-clock", wall});
    INFO(wall << ": " << bad_wall.err);
    CHECK(bad_wall.exit_code == 2);
    CHECK(bad_wall.err.find("limits.wall_clock_seconds") != std::string::npos);
  }
  CHECK(runs() == before);
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

TEST_CASE("forktrial preflight says whether activegraph's child can run here, and which",
          "[trial][cli][activegraph]") {
  const std::string standin = FORKTRIAL_SOURCE_DIR "/tests/python/standin";
  auto found =
      run_command({"env", "PYTHONPATH=" + standin, FORKTRIAL_BINARY, "preflight", "--json"});
  INFO(found.err);
  REQUIRE(found.exit_code == 0);
  const auto executors = nlohmann::json::parse(found.out)["executors"];
  REQUIRE(executors.size() == 2);
  CHECK(executors[0]["name"] == "lua");
  CHECK(executors[1]["name"] == "activegraph");
  CHECK(executors[1]["ok"] == true);
  CHECK(executors[1]["version"] == "0.0.0+standin");
  CHECK(executors[1]["python_path"][0] == standin);
  // Without it on the path, the executor is missing, and preflight says why.
  auto missing = run_command({"env", "-u", "PYTHONPATH", FORKTRIAL_BINARY, "preflight"});
  CHECK(missing.exit_code == 0);
  CHECK_THAT(missing.out, Catch::Contains("executor activegraph: not available: activegraph "
                                          "does not import with"));
  auto nowhere = cli({"preflight", "--json", "--python", "no-such-python-here"});
  CHECK_THAT(nlohmann::json::parse(nowhere.out)["executors"][1]["why"].get<std::string>(),
             Catch::Contains("no Python interpreter \"no-such-python-here\""));
}

TEST_CASE("forktrial trial runs an activegraph pack in activegraph's child",
          "[trial][cli][activegraph]") {
  TempDir dir;
  const auto store = imported_store(dir);
  std::ifstream manifest(FORKTRIAL_SOURCE_DIR
                         "/tests/pack/data/activegraph-packs/chat/manifest.toml");
  std::stringstream text;
  text << manifest.rdbuf();
  dir.write("chat/manifest.toml", text.str());
  dir.write("chat/__init__.py", "PACK = 'chat'\n");
  dir.write("chat/scenarios.py",
            "def main(rt):\n"
            "    rt.emit('custom.noted', {'n': 1}, 'chat.pack')\n");
  auto result = run_command({"env", "PYTHONPATH=" FORKTRIAL_SOURCE_DIR "/tests/python/standin",
                             FORKTRIAL_BINARY, "trial", "--store", store, "--run", "run_chat",
                             "--at", "evt_031", "--pack", (dir.path() / "chat").string(),
                             "--scenario", "scenarios.py", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  CHECK(report["outcome"] == "completed");
  CHECK(report["events_appended"] == 1);
  CHECK(report["executor"] ==
        nlohmann::json{{"name", "activegraph"}, {"version", "0.0.0+standin"}});
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

// A store holding the recorded chat run, and an empty directory to be the
// TMPDIR of the trials run on it, so that their scratch directories land
// there and nowhere else.
struct CliFixture {
  TempDir dir;
  std::string store = imported_store(dir);
  std::filesystem::path tmpdir = dir.path() / "tmp";
  std::filesystem::path err = dir.path() / "stderr";
  CliFixture() { std::filesystem::create_directory(tmpdir); }
};

// `forktrial trial` on a candidate that spins forever (the CPU and memory
// nets bound it should a test fail), started in the background the way a
// shell starts a command: default dispositions for SIGINT and SIGTERM, TMPDIR
// set to the fixture's, stderr to its `err`. Killed and reaped if the test
// ends before it.
class SpinningTrial {
 public:
  explicit SpinningTrial(const CliFixture& f) {
    forktrial::testing::PackSpec spinner;
    spinner.pack_lua = forktrial::testing::pack_header(spinner) + "return pack\n";
    spinner.files["spin.lua"] = "function main(rt) while true do end end\n";
    const auto pack = forktrial::testing::write_pack(f.dir, "spinner", spinner);
    std::vector<std::string> argv = {
        FORKTRIAL_BINARY, "trial",   "--store",   f.store,       "--run",      "run_chat",
        "--at",           "evt_031", "--pack",    pack.string(), "--scenario", "spin.lua",
        "--wall-clock",   "600",     "--max-cpu", "30",          "--max-rss",  "256M"};
    pid_ = forktrial::testing::spawn_as_shell(argv, {"TMPDIR=" + f.tmpdir.string()}, f.err);
  }
  ~SpinningTrial() {
    if (pid_ > 0 && ::kill(pid_, SIGKILL) == 0) ::waitpid(pid_, nullptr, 0);
  }
  SpinningTrial(const SpinningTrial&) = delete;
  SpinningTrial& operator=(const SpinningTrial&) = delete;

  // The pid of its trial child once that runs (its scratch directory exists
  // by then), or 0 after 10 s.
  int child() const {
    for (int i = 0; i < 400; ++i) {
      if (auto children = children_of(pid_); children.size() == 1) return children[0];
      ::usleep(25'000);
    }
    return 0;
  }

  // Sends `signal` and returns the wait status, or -1 if it did not end
  // within 30 s (it is then killed when the test ends).
  int stop(int signal) {
    ::kill(pid_, signal);
    for (int i = 0; i < 1200; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return status;
      }
      ::usleep(25'000);
    }
    return -1;
  }

 private:
  pid_t pid_ = 0;
};

// Waits up to 10 s for `pid` to be gone; whether it is.
bool gone_within_10s(int pid) {
  for (int i = 0; i < 400; ++i) {
    if (::kill(pid, 0) != 0) return true;
    ::usleep(25'000);
  }
  return false;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The ids of the runs in `store`.
std::vector<std::string> run_ids(const std::string& store) {
  auto listed = cli({"run", "ls", "--store", store, "--json", "--all"});
  REQUIRE(listed.exit_code == 0);
  std::vector<std::string> ids;
  for (const auto& run : nlohmann::json::parse(listed.out)) ids.push_back(run["id"]);
  return ids;
}

// SIGTERM or SIGINT to a running trial: it stops, removes its scratch
// directory, records nothing and ends the way the signal would have.
void check_stopped_by(int signal, const std::string& name) {
  CliFixture f;
  SpinningTrial trial(f);
  const int child = trial.child();
  REQUIRE(child != 0);
  REQUIRE(names_in(f.tmpdir).size() == 1);  // its scratch directory

  const int status = trial.stop(signal);
  REQUIRE(status != -1);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == signal);  // a shell reports 128 + signal
  CHECK(gone_within_10s(child));
  CHECK(names_in(f.tmpdir) == std::vector<std::string>{});
  CHECK(read_file(f.err) == "forktrial: trial interrupted by " + name +
                                ": the trial was stopped, its scratch store removed, and nothing "
                                "was recorded in the store\n");
  CHECK(run_ids(f.store) == std::vector<std::string>{"run_chat"});
}

// Kills forktrial outright once its spinning trial's child runs, so that it
// cannot kill its child itself; whether the child died with it.
bool child_dies_with_killed_forktrial(const CliFixture& f) {
  SpinningTrial trial(f);
  const int child = trial.child();
  REQUIRE(child != 0);
  REQUIRE(trial.stop(SIGKILL) != -1);
  return gone_within_10s(child);
}

}  // namespace

TEST_CASE("a trial child dies with the forktrial process that supervises it", "[trial][cli]") {
  CliFixture f;
  CHECK(child_dies_with_killed_forktrial(f));
}

TEST_CASE("SIGTERM stops a trial and leaves no scratch directory and no record", "[trial][cli]") {
  check_stopped_by(SIGTERM, "SIGTERM");
}

TEST_CASE("SIGINT stops a trial and leaves no scratch directory and no record", "[trial][cli]") {
  check_stopped_by(SIGINT, "SIGINT");
}

TEST_CASE("the next trial sweeps the scratch directory of a killed forktrial but not a live one",
          "[trial][cli]") {
  CliFixture f;
  REQUIRE(child_dies_with_killed_forktrial(f));
  REQUIRE(names_in(f.tmpdir).size() == 1);  // SIGKILL leaves the scratch directory behind

  // A scratch directory whose owner is alive: this test holds its lock.
  const auto live = f.tmpdir / "forktrial-scratch-live01";
  std::filesystem::create_directory(live);
  UniqueFd lock(::open(live.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(lock);
  REQUIRE(::flock(lock.get(), LOCK_EX | LOCK_NB) == 0);

  auto next = run_command({"env", "TMPDIR=" + f.tmpdir.string(), FORKTRIAL_BINARY, "trial",
                           "--store", f.store, "--run", "run_chat", "--at", "evt_031", "--pack",
                           kExamples + "/packs/chat_echo", "--scenario", "scenarios/replay.lua"});
  INFO(next.err);
  CHECK(next.exit_code == 0);
  CHECK(names_in(f.tmpdir) == std::vector<std::string>{"forktrial-scratch-live01"});
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
                                         "run_chat", "--at",       "evt_031", "--pack",
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
  auto result = cli({"trial", "--store", store, "--run", "run_chat", "--at", "evt_031", "--pack",
                     kExamples + "/packs/greeter", "--label", "\x1b[2J\x1b[Hforged"});
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(result.err.find('\x1b') == std::string::npos);
  CHECK(result.err.find("label \"\\x1b[2J\\x1b[Hforged\" contains the control character "
                        "U+001B at offset 0") != std::string::npos);
  auto runs = nlohmann::json::parse(cli({"run", "ls", "--store", store, "--json", "--all"}).out);
  CHECK(runs.size() == 1);
}

TEST_CASE("the helper that runs commands for these tests stops one that hangs", "[cli]") {
  TempDir dir;
  const auto marker = dir.path() / "member-pid";
  // A command that never ends, with a member of its group that would outlive
  // a kill of the command alone.
  const std::string script = "sleep 60 & echo $! > '" + marker.string() + "'; wait";
  CHECK_THROWS_WITH(run_command({"/bin/sh", "-c", script}, std::chrono::seconds(1)),
                    Catch::StartsWith("the command did not finish within 1 s and was killed"));
  std::ifstream in(marker);
  pid_t member = 0;
  in >> member;
  REQUIRE(member > 0);
  // SIGKILL was sent to the whole group; the member may take a moment to die.
  const auto dead = [&] {
    std::ifstream stat("/proc/" + std::to_string(member) + "/stat");
    std::string line;
    return !std::getline(stat, line) || line.substr(line.rfind(')') + 2, 1) == "Z";
  };
  bool gone = dead();
  for (int i = 0; i < 100 && !gone; ++i) {
    ::usleep(100'000);
    gone = dead();
  }
  CHECK(gone);
  if (!gone) ::kill(member, SIGKILL);
}

TEST_CASE("an installed forktrial finds its own child, not the build tree's",
          "[cli][install][release-only]") {
  TempDir dir;
  const auto prefix = dir.path() / "prefix";
  auto installed =
      run_command({FORKTRIAL_CMAKE, "--install", FORKTRIAL_BUILD_DIR, "--prefix", prefix.string()});
  INFO(installed.out << installed.err);
  REQUIRE(installed.exit_code == 0);
  const auto forktrial = prefix / "bin" / "forktrial";
  const auto child = prefix / "libexec" / "forktrial" / "forktrial-child";
  REQUIRE(std::filesystem::exists(forktrial));
  REQUIRE(std::filesystem::exists(child));
  // Without the tests' pointer to the build tree's child.
  auto result = run_command(
      {"/usr/bin/env", "-u", "FORKTRIAL_CHILD", forktrial.string(), "preflight", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["ok"] == true);
  CHECK(report["child"] == child.string());
  // And FORKTRIAL_CHILD chooses another one.
  auto chosen = run_command({"/usr/bin/env", "FORKTRIAL_CHILD=" + child.string(),
                             (prefix / "bin" / "forktrial").string(), "preflight", "--json"});
  CHECK(nlohmann::json::parse(chosen.out)["child"] == child.string());
}

TEST_CASE("forktrial trial --isolation strict runs a Lua candidate to completion under every net",
          "[trial][cli][strict]") {
  auto probe = cli({"preflight", "--isolation", "strict", "--json"});
  INFO(probe.err);
  REQUIRE(probe.exit_code == 0);
  const auto preflight = nlohmann::json::parse(probe.out);
  CHECK(preflight["isolation"] == "strict");
  REQUIRE(preflight["nets"].size() == 3);
  std::string missing;
  for (const auto& net : preflight["nets"]) {
    // A net this host cannot apply is announced, by preflight and by the trial.
    if (!net["applies"].get<bool>()) missing += net["name"].get<std::string>() + " ";
  }
  TempDir dir;
  const auto store = imported_store(dir);
  auto result = chat_echo_trial(store, {"--isolation", "strict"});
  INFO(result.err << result.out);
  CHECK(result.exit_code == 0);
  auto report = nlohmann::json::parse(result.out);
  CHECK(report["outcome"] == "completed");
  CHECK(report["events_appended"].get<int>() > 0);
  if (missing.empty()) {
    forktrial::testing::check_no_degraded_net(report["warnings"].get<std::vector<std::string>>());
    forktrial::testing::check_no_degraded_net(
        preflight["warnings"].get<std::vector<std::string>>());
  } else {
    WARN("this host cannot apply: " << missing);
    CHECK_FALSE(report["warnings"].empty());
  }
  // The same trial, standard, appends the same events: the filter changed nothing.
  auto standard = chat_echo_trial(store);
  REQUIRE(standard.exit_code == 0);
  CHECK(nlohmann::json::parse(standard.out)["events_appended"] == report["events_appended"]);
}

TEST_CASE("forktrial --isolation refuses a level it does not know", "[trial][cli][strict]") {
  auto result = cli({"preflight", "--isolation", "paranoid"});
  CHECK(result.exit_code != 0);
  CHECK(result.err.find("--isolation") != std::string::npos);
}

TEST_CASE("forktrial --version names its version, its wire protocol and its store schema",
          "[cli]") {
  auto result = cli({"--version"});
  CHECK(result.exit_code == 0);
  CHECK(result.out == "forktrial " FORKTRIAL_VERSION_FOR_TESTS " (wire protocol " +
                          std::to_string(forktrial::schema::wire::K_PROTOCOL_VERSION) +
                          ", store schema " + std::to_string(forktrial::store::kSchemaVersion) +
                          ")\n");
}
