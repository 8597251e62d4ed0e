// The `forktrial run` commands, run as a user would: the real binary in a
// separate process.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "store/event_store.h"
#include "tests/support/temp_dir.h"

namespace {

using forktrial::testing::CommandResult;
using forktrial::testing::run_command;
using forktrial::testing::TempDir;
using nlohmann::json;

// In the bytes activegraph's export-trace writes, which `run export` writes
// back unchanged.
const std::string kInput =
    R"({"id": "evt_001", "type": "goal.created", "payload": {"goal": "greet"}, "actor": "user", "frame_id": null, "caused_by": null, "timestamp": "2026-01-02T03:04:05.000001+00:00"})"
    "\n"
    R"({"id": "evt_002", "type": "object.created", "payload": {"data": {"text": "hi"}, "type": "greeting"}, "actor": "greeter", "frame_id": "f1", "caused_by": "evt_001", "timestamp": "2026-01-02T03:04:05.000002+00:00"})"
    "\n"
    R"({"id": "evt_003", "type": "behavior.failed", "payload": {"behavior": "greeter"}, "actor": null, "frame_id": null, "caused_by": "evt_002", "timestamp": "2026-01-02T03:04:05.000003+00:00"})"
    "\n";

struct Cli {
  TempDir dir;
  std::string store = (dir.path() / "store").string();

  CommandResult run(std::vector<std::string> args) {
    args.push_back("--store");
    args.push_back(store);
    return forktrial::testing::run_forktrial(std::move(args));
  }
  // Runs a command that must succeed; returns its stdout.
  std::string ok(std::vector<std::string> args) {
    CommandResult r = run(args);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
  }
};

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST_CASE("run import, fork, show, events and export work end to end", "[store][cli]") {
  Cli cli;
  auto input = cli.dir.write("session.jsonl", kInput);
  std::string root =
      trim(cli.ok({"run", "import", input.string(), "--label", "session", "--id", "run_session"}));
  CHECK(root == "run_session");

  // Export reproduces the imported lines exactly.
  CHECK(cli.ok({"run", "export", root}) == kInput);

  json fork =
      json::parse(cli.ok({"run", "fork", root, "--at", "evt_002", "--label", "retry", "--json"}));
  std::string fork_id = fork["id"];
  CHECK(fork["events"] == 2);
  CHECK(fork["parent"]["run"] == "run_session");
  CHECK(fork["parent"]["event_id"] == "evt_002");
  CHECK(fork["parent"]["seq"] == 2);

  std::string fork_of_fork =
      trim(cli.ok({"run", "fork", fork_id, "--at", "evt_001", "--id", "run_deep"}));
  CHECK(fork_of_fork == "run_deep");

  json show = json::parse(cli.ok({"run", "show", "run_deep", "--json"}));
  CHECK(show["events"] == 1);
  CHECK(show["own_events"] == 0);
  REQUIRE(show["lineage"].size() == 2);
  CHECK(show["lineage"][0]["id"] == fork_id);
  CHECK(show["lineage"][1]["id"] == "run_session");
  CHECK(show["behavior_failures"] == 0);

  std::string text = cli.ok({"run", "show", root});
  CHECK_THAT(text, Catch::Contains("events     3 (0 inherited, 3 own)") &&
                       Catch::Contains("failures   1 behavior.failed") &&
                       Catch::Contains("root run"));

  std::string lines = cli.ok({"run", "events", fork_id, "--json"});
  std::vector<json> events;
  for (std::size_t start = 0, end; (end = lines.find('\n', start)) != std::string::npos;
       start = end + 1) {
    events.push_back(json::parse(lines.substr(start, end - start)));
  }
  REQUIRE(events.size() == 2);
  CHECK(events[0]["id"] == "evt_001");
  CHECK(events[1]["seq"] == 2);
  CHECK(events[1]["frame_id"] == "f1");
  std::string failed = cli.ok({"run", "events", root, "--type", "behavior.failed", "--json"});
  CHECK(json::parse(failed)["id"] == "evt_003");

  json runs = json::parse(cli.ok({"run", "ls", "--json"}));
  REQUIRE(runs.size() == 3);
  CHECK(runs[0]["id"] == "run_session");
  CHECK(runs[0]["events"] == 3);
  CHECK(runs[1]["id"] == fork_id);
  CHECK(runs[2]["id"] == "run_deep");

  // The export of a fork re-imports as a root run with the same history.
  auto fork_file = cli.dir.path() / "fork.jsonl";
  cli.ok({"run", "export", fork_id, "-o", fork_file.string()});
  std::string reimported = trim(cli.ok({"run", "import", fork_file.string()}));
  CHECK(cli.ok({"run", "export", reimported}) == cli.ok({"run", "export", fork_id}));
}

TEST_CASE("run new creates empty runs and refuses a taken id", "[store][cli]") {
  Cli cli;
  json run = json::parse(cli.ok({"run", "new", "--label", "blank", "--id", "run_x", "--json"}));
  CHECK(run["id"] == "run_x");
  CHECK(run["label"] == "blank");
  CHECK(run["events"] == 0);
  CHECK(run["parent"].is_null());
  CommandResult again = cli.run({"run", "new", "--id", "run_x"});
  CHECK(again.exit_code != 0);
  CHECK_THAT(again.err, Catch::Contains("run_x is already stored"));
  CHECK(again.out.empty());
}

TEST_CASE("run ls leaves out the runs forktrial made unless asked", "[store][cli]") {
  Cli cli;
  auto input = cli.dir.write("session.jsonl", kInput);
  cli.ok({"run", "import", input.string(), "--id", "run_session"});
  // Runs named as a local trial's fork, a cluster job's forks and the
  // coordinator's log are named.
  for (const char* id : {"run_trial_0123456789abcdef", "run_job_00000000000000aa_0_a1",
                         "run_job_00000000000000aa_1_a2", "run_job_00000000000000bb_0_a1",
                         "forktrial.orchestration"}) {
    cli.ok({"run", "fork", "run_session", "--at", "evt_002", "--id", id});
  }
  cli.ok({"run", "fork", "run_session", "--at", "evt_002", "--id", "run_mine"});
  const auto ids = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"run", "ls", "--json"});
    std::vector<std::string> out;
    for (const auto& run : json::parse(cli.ok(args))) out.push_back(run["id"]);
    return out;
  };
  CHECK(ids({}) == std::vector<std::string>{"run_session", "run_mine"});
  CHECK(ids({"--all"}).size() == 7);
  CHECK(ids({"--job", "job_00000000000000aa"}) ==
        std::vector<std::string>{"run_job_00000000000000aa_0_a1", "run_job_00000000000000aa_1_a2"});
  CHECK(ids({"--job", "job_ffffffffffffffff"}).empty());
  // The table says what it left out, on stderr.
  const CommandResult table = cli.run({"run", "ls"});
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("run_mine") && !Catch::Contains("run_trial_"));
  CHECK_THAT(table.err, Catch::Contains("5 runs forktrial made not shown") &&
                            Catch::Contains("--all lists them"));
  const CommandResult none = cli.run({"run", "ls", "--job", "job_ffffffffffffffff"});
  CHECK_THAT(none.err, Catch::Contains("no fork of job job_ffffffffffffffff"));
  CHECK(cli.run({"run", "ls", "--all", "--job", "job_00000000000000aa"}).exit_code != 0);
}

TEST_CASE("a malformed import line fails the import with its line number", "[store][cli]") {
  Cli cli;
  cli.ok({"run", "new", "--id", "run_existing"});
  std::string bad =
      kInput +
      R"({"id":"evt_004","type":"note","payload":"oops","timestamp":"2026-01-02T03:04:05Z"})"
      "\n";
  auto input = cli.dir.write("bad.jsonl", bad);
  CommandResult r = cli.run({"run", "import", input.string()});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("line 4: field \"payload\" must be an object, found string") &&
                        Catch::Contains("nothing was imported"));
  json runs = json::parse(cli.ok({"run", "ls", "--json"}));
  REQUIRE(runs.size() == 1);  // nothing half-imported
  CHECK(runs[0]["id"] == "run_existing");
}

TEST_CASE("run commands name what is missing", "[store][cli]") {
  Cli cli;
  CommandResult no_store = cli.run({"run", "ls"});
  CHECK(no_store.exit_code != 0);
  CHECK_THAT(no_store.err, Catch::Contains("no store at " + cli.store));
  cli.ok({"run", "new", "--id", "run_a"});
  CommandResult no_run = cli.run({"run", "show", "run_b"});
  CHECK(no_run.exit_code != 0);
  CHECK_THAT(no_run.err, Catch::Contains("no run run_b"));
  auto nowhere = (cli.dir.path() / "no-such-dir" / "out.jsonl").string();
  CommandResult no_dir = cli.run({"run", "export", "run_a", "-o", nowhere});
  CHECK(no_dir.exit_code != 0);
  CHECK_THAT(no_dir.err, Catch::Contains("cannot write " + nowhere + ".partial"));
  CommandResult no_event = cli.run({"run", "fork", "run_a", "--at", "evt_9"});
  CHECK(no_event.exit_code != 0);
  CHECK_THAT(no_event.err,
             Catch::Contains("at event evt_9") && Catch::Contains("forktrial run events run_a"));
}

TEST_CASE("a failed export leaves no file behind", "[store][cli]") {
  Cli cli;
  {
    // A payload that is not JSON can only come from a library caller.
    forktrial::store::EventStore store(cli.store);
    auto run = store.create_run({.id = forktrial::store::RunId("run_bad")});
    REQUIRE(run);
    forktrial::store::NewEvent good{forktrial::store::EventId("e1"), "t", "{}",
                                    "2026-01-01T00:00:00Z"};
    forktrial::store::NewEvent bad{forktrial::store::EventId("e2"), "t", "{oops",
                                   "2026-01-01T00:00:00Z"};
    REQUIRE(store.append(run->id, 0, std::vector{good, bad}));
  }
  auto out = cli.dir.path() / "bad.jsonl";
  CommandResult r = cli.run({"run", "export", "run_bad", "-o", out.string()});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("event e2 (seq 2) has a payload that is not valid JSON"));
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out.string() + ".partial"));
}

TEST_CASE("run import-sqlite imports an activegraph store", "[store][cli]") {
  Cli cli;
  auto path = cli.dir.path() / "ag.db";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  const char* sql =
      "CREATE TABLE runs (run_id TEXT, parent_run_id TEXT, forked_at_event_id TEXT);"
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "INSERT INTO meta VALUES ('schema_version', '1');"
      "CREATE TABLE events (run_id TEXT, seq INT, id TEXT, type TEXT, payload TEXT, "
      "timestamp TEXT);"
      "INSERT INTO runs VALUES ('r_root', NULL, NULL), ('r_fork', 'r_root', 'e1');"
      "INSERT INTO events VALUES ('r_root', 1, 'e1', 'a', '{}', '2026-01-01T00:00:01Z'),"
      " ('r_root', 2, 'e2', 'b', '{}', '2026-01-01T00:00:02Z'),"
      " ('r_fork', 1, 'f1', 'c', '{\"k\": 1}', '2026-01-01T00:00:03Z');";
  REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  json runs = json::parse(cli.ok({"run", "import-sqlite", path.string(), "--json"}));
  REQUIRE(runs.size() == 2);
  CHECK(runs[1]["id"] == "r_fork");
  CHECK(runs[1]["parent"]["event_id"] == "e1");
  CHECK(runs[1]["events"] == 2);
  std::string exported = cli.ok({"run", "export", "r_fork"});
  CHECK(
      exported ==
      R"({"id": "e1", "type": "a", "payload": {}, "actor": null, "frame_id": null, "caused_by": null, "timestamp": "2026-01-01T00:00:01Z"})"
      "\n"
      R"({"id": "f1", "type": "c", "payload": {"k": 1}, "actor": null, "frame_id": null, "caused_by": null, "timestamp": "2026-01-01T00:00:03Z"})"
      "\n");
}

}  // namespace

namespace {

TEST_CASE("run labels and ids with control characters are refused", "[store][cli]") {
  Cli cli;
  auto input = cli.dir.write("session.jsonl", kInput);
  cli.ok({"run", "import", input.string(), "--id", "run_ok"});
  const std::vector<std::vector<std::string>> attempts = {
      {"run", "new", "--label", "\x1b[2J\x1b[Hforged"},
      {"run", "new", "--id", "run\x1b[2J"},
      {"run", "import", input.string(), "--label", "\x1b[2J\x1b[Hforged"},
      {"run", "fork", "run_ok", "--at", "evt_001", "--label", "\x1b[2J\x1b[Hforged"},
  };
  for (const auto& args : attempts) {
    INFO(args[1] << " " << args.back());
    CommandResult r = cli.run(args);
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains("contains the control character U+001B at offset"));
    CHECK(r.err.find('\x1b') == std::string::npos);
  }
  CommandResult id = cli.run({"run", "new", "--id", "run\n2"});
  CHECK_THAT(id.err, Catch::Contains("run id \"run\\n2\" contains the control character U+000A"));
  json runs = json::parse(cli.ok({"run", "ls", "--json"}));
  REQUIRE(runs.size() == 1);
  CHECK(runs[0]["id"] == "run_ok");
}

TEST_CASE("run import labels a run after a file name that is not valid UTF-8 safely",
          "[store][cli]") {
  Cli cli;
  auto input = cli.dir.write("caf\xe9.jsonl", kInput);
  cli.ok({"run", "import", input.string(), "--id", "run_cafe"});
  json runs = json::parse(cli.ok({"run", "ls", "--json"}));
  REQUIRE(runs.size() == 1);
  CHECK(runs[0]["label"] == "caf\\xe9.jsonl");
}

TEST_CASE("run events, ls and show render control and bidi characters visibly", "[store][cli]") {
  Cli cli;
  // A type or an actor is a name: one that holds a format character is
  // refused, since it would print as another name.
  const std::string bidi_type = R"({"id":"evt_001","type":"chat\u202emessage","payload":{},)"
                                R"("actor":"user","timestamp":"2026-01-02T03:04:05Z"})"
                                "\n";
  auto refused = cli.run(
      {"run", "import", cli.dir.write("bidi-type.jsonl", bidi_type).string(), "--id", "run_type"});
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains("holds U+202E, an invisible or format character") &&
                              Catch::Contains("nothing was imported"));

  const std::string line =
      R"({"id":"evt_001","type":"chat.message","payload":{"text":"\u009b2J\u001b[31m\u202e"},)"
      R"("actor":"user","timestamp":"2026-01-02T03:04:05Z"})"
      "\n";
  auto input = cli.dir.write("bidi.jsonl", line);
  cli.ok({"run", "import", input.string(), "--id", "run_bidi", "--label", "evil\u202etxt.exe"});
  auto hostile = [](const std::string& text) {
    INFO(text);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find("\xc2\x9b") == std::string::npos);
    CHECK(text.find("\xe2\x80\xae") == std::string::npos);
    CHECK(text.find("\xe2\x81\xa6") == std::string::npos);
  };
  std::string events = cli.ok({"run", "events", "run_bidi"});
  hostile(events);
  // the payload as recorded: its escapes stay escapes
  CHECK_THAT(events, Catch::Contains(R"({"text":"\u009b2J\u001b[31m\u202e"})"));
  std::string ls = cli.ok({"run", "ls"});
  hostile(ls);
  CHECK_THAT(ls, !Catch::Contains("run_type"));
  CHECK_THAT(ls, Catch::Contains("evil\\u{202e}txt.exe"));
  std::string show = cli.ok({"run", "show", "run_bidi"});
  hostile(show);
  CHECK_THAT(show, Catch::Contains("label      evil\\u{202e}txt.exe\n"));
  // JSON keeps the text as it is: JSON itself escapes what needs escaping.
  json event = json::parse(cli.ok({"run", "events", "run_bidi", "--json"}));
  CHECK(event["payload"]["text"] == "\u009b2J\u001b[31m\u202e");
}

}  // namespace

TEST_CASE("a refusal's category sets the exit status", "[store][cli]") {
  Cli cli;
  cli.ok({"run", "new", "--id", "run_taken"});
  auto taken = cli.run({"run", "new", "--id", "run_taken"});
  CHECK(taken.exit_code == 1);  // conflict
  CHECK_THAT(taken.err, Catch::Contains("run_taken is already stored"));
  auto invalid = cli.run({"run", "new", "--id", "run\x1b[2J"});
  CHECK(invalid.exit_code == 2);  // invalid_argument: what was typed is wrong
  CHECK(invalid.out.empty());
}
