// The cluster as a user runs it: a real coordinator and real workers, each
// its own `forktrial` process on an ipc endpoint, and the command line's
// clients. Every trial that ends must have exactly one reconciled fork in the
// store, whatever was killed, retried or restarted.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "coordinator/orchestration_log.h"
#include "pack/bundle_archive.h"
#include "pack/bundle_hash.h"
#include "schema/outcome.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "tests/coordinator/cluster_support.h"
#include "tests/support/exposition.h"
#include "tests/support/http_get.h"
#include "tests/support/power_loss.h"
#include "tests/support/skip.h"
#include "tests/support/small_disk.h"
#include "tests/support/temp_dir.h"

using namespace forktrial::testing::cluster;

TEST_CASE("a batch across two workers ends in every outcome, each fork recorded once",
          "[cluster]") {
#ifdef FORKTRIAL_SANITIZED
  constexpr int kEach = 15;  // ThreadSanitizer's cost: the same paths, fewer trials
#else
  constexpr int kEach = 50;
#endif
  constexpr int kTotal = 4 * kEach;
  const std::string each = std::to_string(kEach);
  const std::string total = std::to_string(kTotal);
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);
  cluster.start_worker(2);
  const std::string job = cluster.submit(cluster.outcome_batch(kEach));
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["total"] == kTotal);
  CHECK(summary["reconciled"] == kTotal);
  CHECK(summary["completed"] == kEach);
  CHECK(summary["scenario_failed"] == kEach);
  CHECK(summary["limits_exceeded"] == kEach);
  CHECK(summary["materialization_failed"] == kEach);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == std::size_t{kTotal});
  require_exactly_once(cluster, results);
  std::set<std::string> workers;
  for (const auto& r : results) {
    workers.insert(r["worker"].get<std::string>());
    CHECK(r["isolation"]["level"] == "standard");
  }
  CHECK(workers == std::set<std::string>{"w1", "w2"});
  // Each worker's hello told what protects its trials.
  const json known = json::parse(cluster.client({"workers", "--json"}).out);
  REQUIRE(known["workers"].size() == 2);
  for (const auto& w : known["workers"]) {
    CHECK(w["isolation"]["process"]["provided"] == true);
    CHECK(w["degraded_nets"].is_array());
  }
  // The parent run is unchanged.
  auto shown = run_forktrial({"run", "show", "run_chat", "--store", cluster.store, "--json"});
  CHECK(json::parse(shown.out)["events"] == 31);

  // Exported to SQLite, for the tools people analyse with: a row per trial,
  // and exported again, still one.
  const std::string db = (cluster.dir.path() / "results.db").string();
  for (int pass = 0; pass < 2; ++pass) {
    const auto exported = cluster.client({"results", job, "--sqlite", db});
    INFO(exported.err);
    REQUIRE(exported.exit_code == 0);
    CHECK_THAT(exported.out, Catch::Contains("wrote " + total + " results of 1 job(s) to " + db));
  }
  const auto query = [&](const std::string& sql) {
    const auto answered = forktrial::testing::run_command({"sqlite3", db, sql});
    INFO(answered.err);
    REQUIRE(answered.exit_code == 0);
    return answered.out;
  };
  CHECK(query("SELECT count(*) FROM results") == total + "\n");
  CHECK(query("SELECT outcome, count(*) FROM results GROUP BY outcome ORDER BY outcome") ==
        "completed|" + each + "\nlimits_exceeded|" + each + "\nmaterialization_failed|" + each +
            "\nscenario_failed|" + each + "\n");
  CHECK(query("SELECT job, state, total FROM jobs") == job + "|finished|" + total + "\n");
  CHECK(query("SELECT count(*) FROM results WHERE line = json(line) AND executor = 'lua' AND "
              "fork_run_id = 'run_' || job || '_' || trial_index || '_a' || attempts") ==
        total + "\n");
}

namespace {

// activegraph Python packs for the stand-in of activegraph's trial child
// (tests/python/standin: activegraph itself cannot be installed here), with
// scenarios that end every way a child can (tests/python/outcome_scenarios.py).

const std::string kStandin = FORKTRIAL_SOURCE_DIR "/tests/python/standin";

// A pack as activegraph lays one out, its manifest's content hash true.
std::string python_pack(Cluster& cluster, const std::string& name, const std::string& init) {
  cluster.dir.write(name + "/__init__.py", init);
  cluster.dir.write(name + "/scenarios.py",
                    cluster.read(FORKTRIAL_SOURCE_DIR "/tests/python/outcome_scenarios.py"));
  const std::string root = (cluster.dir.path() / name).string();
  const auto hashed = run_forktrial({"pack", "hash", "--content", root});
  REQUIRE(hashed.exit_code == 0);
  cluster.dir.write(name + "/manifest.toml",
                    "[pack]\nname = \"" + name +
                        "\"\nversion = \"0.1.0\"\ndescription = \"a stand-in pack\"\n"
                        "[pack.provenance]\nauthors = [\"forktrial tests\"]\n"
                        "authored_by = \"human\"\n"
                        "[pack.integrity]\ncontent_hash = \"" +
                        forktrial::testing::lines_of(hashed.out).at(0) +
                        "\"\n[dependencies]\nactivegraph = \">=1.4,<2.0\"\n[surface]\n");
  return root;
}

std::string python_trial(const std::string& root, const std::string& scenario, const json& limits) {
  return json{{"schema_version", 1},
              {"parent_run_id", "run_chat"},
              {"at_event", "evt_031"},
              {"label", scenario},
              {"candidate", {{"root_dir", root}}},
              {"extra_packs", json::array()},
              {"scenario", "scenarios.py::" + scenario},
              {"limits", limits}}
             .dump() +
         "\n";
}

}  // namespace

TEST_CASE(
    "a batch of Lua and activegraph candidates runs where one worker alone offers activegraph",
    "[cluster][activegraph]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);  // no activegraph where its python3 looks: Lua alone
  const std::string pack = python_pack(cluster, "ag_pack", "PACK = 'ag'\n");
  const std::string broken = python_pack(cluster, "ag_broken", "raise ImportError('no dep')\n");
  const json base{{"wall_clock_seconds", 20}};
  // Each Python scenario, the outcome activegraph's parent reads from it,
  // and the events its fork keeps.
  struct Expected {
    std::string scenario;
    std::string outcome;
    std::uint64_t events;
    json limit = nullptr;  // the net that stopped it
  };
  const std::vector<Expected> expected{
      {"complete", "completed", 2},
      {"fail", "scenario_failed", 1},
      {"lie", "crashed", 1},
      {"crash", "crashed", 1},
      {"sleep", "limits_exceeded", 1, "wall_clock"},  // 1: the kill's record
      {"allocate", "limits_exceeded", 0, "memory"},
      {"flood", "limits_exceeded", 11, "write_budget"},
      {"broken", "materialization_failed", 0}};
  std::string text = cluster.read(cluster.outcome_batch(2));  // 8 Lua trials
  for (const auto& e : expected) {
    json limits = base;
    if (e.scenario == "sleep") limits["wall_clock_seconds"] = 1;
    if (e.scenario == "allocate") limits["max_rss_bytes"] = 256 << 20;
    if (e.scenario == "flood") limits["max_appended_events"] = 10;
    text += python_trial(e.scenario == "broken" ? broken : pack,
                         e.scenario == "broken" ? "complete" : e.scenario, limits);
  }
  const std::string job = cluster.submit(cluster.dir.write("mixed.jsonl", text).string());

  // The Lua worker runs the Lua trials; the job then says why it waits.
  cluster.wait_until_done(job, 8);
  json status;
  for (int i = 0; i < 500; ++i) {
    status = json::parse(cluster.client({"status", job, "--json"}).out);
    if (status["status"]["queued"] == expected.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO(status.dump() << cluster.log_text());
  CHECK(status["done"] == 8);
  CHECK(status["queued_by_executor"] == json{{"lua", 0}, {"activegraph", expected.size()}});
  CHECK(status["waiting"] ==
        "8 queued trials need the activegraph executor, which no live worker offers (a worker "
        "offers it when activegraph imports with its --python)");
  const auto shown = cluster.client({"status", job});
  CHECK_THAT(shown.out, Catch::Contains("WAITING") &&
                            Catch::Contains("waiting: 8 queued trials need the activegraph "
                                            "executor"));
  CHECK(status["status"]["leased"] == 0);  // never leased to the worker that cannot run them

  // A worker with activegraph on its interpreter's path offers it, and runs them.
  cluster.start_worker(2, 2, {"PYTHONPATH=" + kStandin});
  const json summary = cluster.wait(job);
  CHECK(summary["total"] == 16);
  CHECK(summary["reconciled"] == 16);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 16);
  require_exactly_once(cluster, results);
  std::size_t python = 0;
  for (const auto& r : results) {
    INFO(r.dump());
    if (r["executor"]["name"] == "lua") {
      CHECK(r["executor"]["version"] == "");
      if (r["candidate"] == "runaway") CHECK(r["limit"] == "event_budget");
      continue;
    }
    const Expected& e = expected.at(python++);
    CHECK(r["executor"] == json{{"name", "activegraph"}, {"version", "0.0.0+standin"}});
    CHECK(r["worker"] == "w2");
    CHECK(r["outcome"] == e.outcome);
    CHECK(r["events_appended"] == e.events);
    CHECK(r["limit"] == e.limit);
    CHECK(r["attempts"] == 1);
  }
  CHECK(python == expected.size());
  const json known = json::parse(cluster.client({"workers", "--json"}).out);
  for (const auto& w : known["workers"]) {
    CHECK(w["executors"].size() == (w["worker"] == "w1" ? 1U : 2U));
  }
  CHECK_THAT(cluster.log_text(), Catch::Contains("not offering the activegraph executor") &&
                                     Catch::Contains("offering the activegraph executor: "
                                                     "activegraph 0.0.0+standin"));
}

TEST_CASE("forktrial batch runs activegraph packs where activegraph imports, and says so where not",
          "[cluster][activegraph]") {
  Cluster cluster;
  const std::string pack = python_pack(cluster, "ag_pack", "PACK = 'ag'\n");
  const auto batch =
      cluster.dir.write("py.toml",
                        "name = \"py\"\nrun = \"run_chat\"\nat = \"evt_031\"\nrepeat = 2\n"
                        "[[candidates]]\npack = \"" +
                            pack +
                            "\"\n[[scenarios]]\nfile = \"scenarios.py::complete\"\n"
                            "[[scenarios]]\nfile = \"scenarios.py::fail\"\n");
  auto ran = forktrial::testing::run_command({"env", "PYTHONPATH=" + kStandin, FORKTRIAL_BINARY,
                                              "batch", batch.string(), "--store", cluster.store,
                                              "--workers", "1", "--json"});
  INFO(ran.err);
  REQUIRE(ran.exit_code == 0);  // every trial reconciled, whatever its outcome
  const auto lines = forktrial::testing::lines_of(ran.out);
  REQUIRE(lines.size() == 5);
  std::map<std::string, int> outcomes;
  for (std::size_t i = 0; i < 4; ++i) {
    const json r = json::parse(lines[i]);
    ++outcomes[r["outcome"].get<std::string>()];
    CHECK(r["executor"]["name"] == "activegraph");
  }
  CHECK(outcomes == std::map<std::string, int>{{"completed", 2}, {"scenario_failed", 2}});

  auto refused =
      forktrial::testing::run_command({"env", "-u", "PYTHONPATH", FORKTRIAL_BINARY, "batch",
                                       batch.string(), "--store", cluster.store, "--workers", "1"});
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err,
             Catch::Contains("the batch has activegraph packs, and activegraph's trial child "
                             "cannot run here: activegraph does not import with") &&
                 Catch::Contains("--python"));
}

TEST_CASE("a run imported into a remote coordinator's store is forked by its jobs",
          "[cluster][import]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);
  const std::string trace = kExamples + "/runs/chat.jsonl";
  auto imported = cluster.client({"import", trace, "--id", "run_remote", "--json"});
  INFO(imported.err);
  REQUIRE(imported.exit_code == 0);
  const json run = json::parse(imported.out);
  CHECK(run ==
        json{{"id", "run_remote"}, {"label", "chat.jsonl"}, {"events", 31}, {"parent", nullptr}});
  // Sent again (an answer lost, say), it is the same run; another file
  // under that id is refused.
  auto again = cluster.client({"import", trace, "--id", "run_remote", "--json"});
  CHECK(again.exit_code == 0);
  CHECK(json::parse(again.out) == run);
  // An id the coordinator names its trials' forks with is not a client's to
  // take (it would stop that trial from ever being recorded).
  auto squatting = cluster.client({"import", trace, "--id", "run_job_0123456789abcdef_0_a1"});
  CHECK(squatting.exit_code == 1);
  CHECK_THAT(squatting.err, Catch::Contains("is the coordinator's own") &&
                                Catch::Contains("give the run another id"));
  // A file past what the coordinator parses on its loop is refused, saying so.
  const auto huge = cluster.dir.write("huge.jsonl", std::string((std::size_t{64} << 20) + 1, '\n'));
  auto too_big = cluster.client({"import", huge.string(), "--id", "run_huge"});
  CHECK(too_big.exit_code == 1);
  CHECK_THAT(too_big.err, Catch::Contains("a client imports at most 67108864"));
  auto taken = cluster.client({"import", trace, "--id", "run_remote", "--label", "other"});
  CHECK(taken.exit_code == 1);
  CHECK_THAT(taken.err, Catch::Contains("has a run run_remote already"));
  const auto bad = cluster.dir.write("bad.jsonl", "{\"id\": \"evt_1\"}\nnot json\n");
  auto refused = cluster.client({"import", bad.string(), "--id", "run_bad"});
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("nothing was imported"));
  // A fork of it, then a job forking that.
  auto fork = cluster.client({"import", kExamples + "/runs/chat-whatif.jsonl", "--id", "run_whatif",
                              "--fork-of", "run_remote", "--at", "evt_009", "--json"});
  INFO(fork.err);
  REQUIRE(fork.exit_code == 0);
  CHECK(json::parse(fork.out)["parent"] == json{{"run", "run_remote"}, {"at", "evt_009"}});
  const std::string job = cluster.submit(cluster.outcome_batch(2, 1, "run_remote"));
  const json summary = cluster.wait(job);
  CHECK(summary["completed"] == 2);
  // A finished job keeps its results: cancelling it is refused, saying so.
  CHECK(json::parse(cluster.client({"status", job, "--json"}).out)["state"] == "finished");
  auto late = cluster.client({"cancel", job});
  CHECK(late.exit_code == 1);
  CHECK_THAT(late.err, Catch::Contains("has finished") && Catch::Contains("nothing to cancel"));
  CHECK(cluster.client({"wait", job}).exit_code == 0);
  // The list of jobs, filtered; the line of a finished job says what it took.
  const auto listed = [&](std::vector<std::string> filters) {
    filters.insert(filters.begin(), {"status", "--json"});
    auto shown = cluster.client(filters);
    INFO(shown.err);
    REQUIRE(shown.exit_code == 0);
    return json::parse(shown.out)["jobs"].size();
  };
  CHECK(listed({}) == 1);
  CHECK(listed({"--state", "finished"}) == 1);
  CHECK(listed({"--state", "running"}) == 0);
  CHECK(listed({"--since", "1h"}) == 1);
  CHECK(listed({"--since", "2020-01-01T00:00:00Z", "--limit", "1"}) == 1);
  CHECK(listed({"--since", "2999-01-01T00:00:00Z"}) == 0);
  auto unparsed = cluster.client({"status", "--since", "yesterday"});
  CHECK(unparsed.exit_code == 2);
  CHECK_THAT(unparsed.err, Catch::Contains("neither an ISO-8601 time"));
  CHECK_THAT(cluster.client({"status", job}).out,
             Catch::Contains("took ") && Catch::Contains("finished"));
}

TEST_CASE("a coordinator whose host does not resolve is said at once, not after the timeout",
          "[cluster]") {
  auto status = run_forktrial(
      {"status", "--coordinator", "tcp://no-such-host.invalid:7600", "--timeout", "30"});
  CHECK(status.exit_code == 1);
  // Whether the resolver answers "unknown" or, offline, "not now".
  CHECK_THAT(status.err, Catch::Contains("host \"no-such-host.invalid\" does not resolve"));
}

TEST_CASE("a client facing a port nothing listens on says the connection was refused",
          "[cluster]") {
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  auto refused = run_forktrial({"status", "--coordinator", endpoint, "--timeout", "1"});
  CHECK(refused.exit_code != 0);
  CHECK(contains(refused.err,
                 "nothing listens at " + endpoint + ": every connection was refused for 1000 ms"));
  CHECK_FALSE(contains(refused.err, "did not answer"));
  // With a long timeout it is said after the refusals' grace, not at the end.
  auto soon = run_forktrial({"status", "--coordinator", endpoint, "--timeout", "60"});
  CHECK(soon.exit_code != 0);
  CHECK(contains(soon.err,
                 "nothing listens at " + endpoint + ": every connection was refused for 2000 ms"));
}

TEST_CASE("a store this user may not write is said so with what to do, not as a bug", "[cluster]") {
  if (::geteuid() != 0 || !std::filesystem::exists("/usr/bin/setpriv")) {
    forktrial::testing::skip("needs root and setpriv (util-linux) to run forktrial as nobody");
    return;
  }
  TempDir dir;
  const std::string store = (dir.path() / "store").string();
  REQUIRE(run_forktrial({"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id",
                         "run_chat"})
              .exit_code == 0);
  namespace fs = std::filesystem;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  for (const auto& entry : fs::directory_iterator(store)) {
    fs::permissions(entry.path(),
                    fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  }
  fs::permissions(store, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                             fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
  auto as_nobody = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup",
                               "--clear-groups", FORKTRIAL_BINARY});
    return forktrial::testing::run_command(args, std::chrono::seconds(30));
  };
  auto coordinator = as_nobody(
      {"coordinator", "--store", store, "--listen", "ipc://" + (dir.path() / "c.sock").string()});
  INFO(coordinator.err);
  CHECK(coordinator.exit_code != 0);
  CHECK(contains(coordinator.err, "failed_precondition: cannot open the store's lock file " +
                                      store + "/writer.lock: Permission denied: this user (uid "));
  CHECK(contains(coordinator.err,
                 "run as the user that owns it, or give a store this user may "
                 "write"));
  auto imported = as_nobody(
      {"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id", "run_again"});
  INFO(imported.err);
  CHECK(imported.exit_code != 0);
  CHECK(contains(imported.err, "Permission denied: this user (uid "));
  for (const auto* said : {&coordinator.err, &imported.err}) {
    CHECK_FALSE(contains(*said, "internal"));
    CHECK_FALSE(contains(*said, "report it"));
  }
  fs::permissions(store, fs::perms::owner_all);  // for the directory's removal
}

TEST_CASE("each client command's help shows its own examples", "[cluster]") {
  for (const std::string command : {"status", "wait", "cancel", "results", "workers", "import"}) {
    INFO(command);
    const auto help = run_forktrial({command, "--help"});
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.out, Catch::Contains("forktrial " + command + " "));
  }
}

TEST_CASE("a worker killed in the middle of a batch loses nothing and doubles nothing",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator("2");
  cluster.start_worker(1);
  cluster.start_worker(2);
  const std::string job = cluster.submit(cluster.outcome_batch(15));
  // Killed in the middle: some trials are done, not all.
  CHECK(cluster.wait_until_done(job, 10) < 60);
  cluster.workers[0]->kill(SIGKILL);
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 60);
  CHECK(summary["abandoned"] == 0);
  require_exactly_once(cluster, cluster.results(job));
}

TEST_CASE("a coordinator killed in the middle of a batch restarts from its log and finishes once",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);
  cluster.start_worker(2);
  const std::string job = cluster.submit(cluster.outcome_batch(15));
  // A client waiting for the job across the restart: it asks again, says
  // hello to the new coordinator, and sees the job finish.
  forktrial::testing::CommandResult waited;
  std::thread waiting([&] { waited = cluster.client({"wait", job, "--json"}); });
  CHECK(cluster.wait_until_done(job, 10) < 60);
  cluster.coordinator->kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  cluster.start_coordinator();
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 60);
  CHECK(summary["abandoned"] == 0);
  waiting.join();
  INFO(waited.err);
  REQUIRE(waited.exit_code == 0);
  CHECK(json::parse(forktrial::testing::lines_of(waited.out).back())["reconciled"] == 60);
  // The workers came back to the restarted coordinator with their leases,
  // so what they were running reported into it instead of being redone.
  CHECK(cluster.log_text().find("reconnected, keeping its leases") != std::string::npos);
  require_exactly_once(cluster, cluster.results(job));
}

TEST_CASE("an acknowledged submission and cancel survive a power loss of the coordinator's machine",
          "[cluster][durability]") {
#ifdef FORKTRIAL_SANITIZED
  forktrial::testing::skip(
      "the power loss is an LD_PRELOAD library, which a sanitizer's runtime must precede");
  return;
#else
  Cluster cluster;
  // The coordinator runs with an undo log of every write to its store's
  // data file not flushed yet: killed, then the log applied, its disk is as
  // a power loss would leave it.
  const std::string data = std::filesystem::canonical(cluster.store + "/data.mdb").string();
  const std::string undo = (cluster.dir.path() / "undo.log").string();
  const std::vector<std::string> power_loss_env{
      std::string("LD_PRELOAD=") + FORKTRIAL_UNSYNCED_WRITES,
      "FORKTRIAL_TEST_UNSYNCED_FILE=" + data, "FORKTRIAL_TEST_UNDO_LOG=" + undo};
  const std::vector<std::string> args{"coordinator", "--store", cluster.store, "--listen",
                                      cluster.endpoint};
  cluster.coordinator = std::make_unique<Daemon>(args, cluster.log, power_loss_env);
  const std::string kept = cluster.submit(cluster.outcome_batch(2, 1));
  const std::string cancelled = cluster.submit(cluster.outcome_batch(2, 1));
  auto cancel = cluster.client({"cancel", cancelled});
  INFO(cancel.err);
  REQUIRE(cancel.exit_code == 0);
  // Later commits (a status answered, time passing) are not flushed: the
  // power loss may take them.
  REQUIRE(cluster.client({"status"}).exit_code == 0);
  cluster.coordinator->kill(SIGKILL);
  const std::size_t dropped = forktrial::testing::drop_unsynced_writes(data, undo);
  INFO("writes the power loss dropped: " << dropped);

  cluster.start_coordinator();
  auto kept_status = cluster.client({"status", kept, "--json"});
  INFO(kept_status.err << cluster.log_text());
  REQUIRE(kept_status.exit_code == 0);
  CHECK(json::parse(kept_status.out)["total"] == 2);
  auto cancelled_status = cluster.client({"status", cancelled, "--json"});
  REQUIRE(cancelled_status.exit_code == 0);
  CHECK(json::parse(cancelled_status.out)["cancelled"] == true);
#endif
}

TEST_CASE("a trial that kills its worker every time is abandoned after the attempt cap",
          "[cluster]") {
  Cluster cluster;
  // A trial child that kills the worker running it (its parent).
  const auto child = cluster.stand_in_child("killer.sh", "kill -9 $PPID\n");
  cluster.start_coordinator("1");
  for (int n = 1; n <= 3; ++n) cluster.start_worker(n, 1, {child});
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  auto waited = cluster.client({"wait", job, "--json"});
  INFO(waited.out << waited.err << cluster.log_text());
  CHECK(waited.exit_code == 1);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 1);
  CHECK(results[0]["status"] == "abandoned");
  CHECK(results[0]["attempts"] == 3);
  CHECK(forktrial::testing::lines_of(results[0]["detail"].get<std::string>()).size() == 3);
  CHECK(cluster.forks().empty());
}

TEST_CASE("a bundle damaged in a worker's cache is never run and is fetched again", "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator("2");
  cluster.start_worker(1);
  const std::string batch = cluster.outcome_batch(1);
  const std::string first = cluster.submit(batch);
  CHECK(cluster.wait(first)["reconciled"] == 4);
  cluster.workers[0]->kill(SIGTERM);
  // Damage every cached pack archive in place: the bytes after its magic.
  const auto data = cluster.dir.path() / "cache-1" / "blobs" / "data.mdb";
  std::string bytes = cluster.read(data.string());
  const std::string magic("FTPACK\0\x01", 8);
  std::size_t damaged = 0;
  for (auto at = bytes.find(magic); at != std::string::npos; at = bytes.find(magic, at + 1)) {
    bytes[at + 20] = static_cast<char>(bytes[at + 20] ^ 0x5a);
    ++damaged;
  }
  REQUIRE(damaged >= 4);
  std::ofstream(data, std::ios::binary | std::ios::trunc) << bytes;
  cluster.start_worker(1);
  const std::string second = cluster.submit(batch);
  const json summary = cluster.wait(second);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 4);
  CHECK(summary["abandoned"] == 0);
  const auto results = cluster.results(second);
  REQUIRE(results.size() == 4);
  int retried = 0;
  for (const auto& r : results) retried += r["attempts"].get<int>() > 1 ? 1 : 0;
  CHECK(retried > 0);  // each damaged bundle cost its trial one attempt
  // The outcomes are those of undamaged bundles.
  std::multiset<std::string> outcomes;
  for (const auto& r : results) outcomes.insert(r["outcome"].get<std::string>());
  CHECK(outcomes == std::multiset<std::string>{"completed", "limits_exceeded",
                                               "materialization_failed", "scenario_failed"});
}

TEST_CASE("a worker's full cache evicts what no trial holds, never what one does", "[cluster]") {
  Cluster cluster;
  // Room for the segment and the two largest of the four packs, not for a
  // third: each new pack must evict one, while the running trial and the
  // one waiting beside it hold theirs.
  std::vector<std::uint64_t> archives;
  for (const char* pack : {"packs/greeter", "candidates/flaky_replies", "candidates/runaway",
                           "candidates/undeclared"}) {
    auto archive = forktrial::pack::archive_pack(kExamples + "/" + pack);
    REQUIRE(archive);
    archives.push_back(archive->bytes.size());
  }
  std::sort(archives.rbegin(), archives.rend());
  std::uint64_t segment = 0;
  {
    forktrial::store::EventStore store(cluster.store);
    auto snapshot = store.snapshot();
    auto run = snapshot.run(forktrial::store::RunId("run_chat"));
    REQUIRE(run);
    segment = snapshot.segment(*run, 31).size();
  }
  const std::uint64_t cap = segment + archives[0] + archives[1] + archives[3] / 2;
  cluster.start_coordinator();
  const auto http = forktrial::testing::free_port();
  cluster.start_worker(0, 1, {},
                       {"--prefetch", "1", "--cache-size", std::to_string(cap), "--log-level",
                        "debug", "--http", std::to_string(http)});
  const std::string job = cluster.submit(cluster.outcome_batch(3, 4));
  const json summary = cluster.wait(job);
  CHECK(summary["reconciled"] == 12);
  const auto results = cluster.results(job);
  for (const auto& r : results) {
    INFO(r.dump());
    CHECK(r["attempts"] == 1);  // no attempt failed for want of room
  }
  require_exactly_once(cluster, results);
  // Its metrics say the same: each of the 12 assignments looked up its
  // segment and its pack, the segment and all four packs were fetched at
  // least once, some were evicted, and the cache stayed within its cap.
  const auto scraped = forktrial::testing::http_get(http, "/metrics");
  const auto metrics = forktrial::testing::parse_exposition(scraped.body);
  INFO(scraped.body);
  REQUIRE(metrics.has_value());
  CHECK(metrics->at("forktrial_worker_cache_hits_total") +
            metrics->at("forktrial_worker_cache_misses_total") ==
        24);
  CHECK(metrics->at("forktrial_worker_cache_misses_total") >= 5);
  CHECK(metrics->at("forktrial_worker_cache_evictions_total") > 0);
  CHECK(metrics->at("forktrial_worker_cache_bytes") <= cap);
  CHECK(metrics->at("forktrial_worker_cache_capacity_bytes") == cap);
  CHECK(metrics->at("forktrial_worker_attempts_failed_total") == 0);
  const std::string log = cluster.log_text();
  INFO(log);
  CHECK(log.find("from the cache, the least recently used") != std::string::npos);
  CHECK(log.find("cannot fetch blob") == std::string::npos);
  // An evicted archive takes its materialized pack with it.
  CHECK(log.find("removed the materialized pack") != std::string::npos);
  const auto bundles = cluster.dir.path() / "cache-0" / "bundles";
  // Materialized packs, and the notes naming their archives (while a
  // worker may be removing them).
  auto count = [&](bool notes) {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(bundles, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(".")) continue;
      if (notes ? name.ends_with(".archive") : entry.is_directory(ec)) ++n;
    }
    return n;
  };
  auto materialized = [&] { return count(false); };
  CHECK(materialized() > 0);
  CHECK(materialized() < 4);
  // A worker started again on a cache that lost its blobs removes the packs
  // that went with them.
  cluster.workers.front()->kill(SIGKILL);
  std::filesystem::remove_all(cluster.dir.path() / "cache-0" / "blobs");
  cluster.start_worker(0, 1, {}, {"--log-level", "debug"});
  for (int i = 0; i < 1000 && materialized() + count(true) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(materialized() == 0);
  CHECK(count(true) == 0);
}

TEST_CASE("the store wins when a child's claim disagrees, on the cluster as on one machine",
          "[cluster]") {
  Cluster cluster;
  // Trial children that claim seven events more than they wrote
  // (tests/sandbox/hostile_child.cc).
  const auto child = cluster.stand_in_child(
      "misreport.sh", "FORKTRIAL_HOSTILE=misreport exec " + std::string(FORKTRIAL_HOSTILE_CHILD) +
                          " <<END\n$job\nEND\n");
  cluster.start_coordinator();
  cluster.start_worker(1, 1, {child});
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  CHECK(cluster.wait(job)["reconciled"] == 1);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 1);
  INFO(results[0].dump());
  CHECK(results[0]["events_appended"] == 2);
  CHECK(results[0]["detail"].get<std::string>().find(
            "the child's tail claimed 9 events appended") != std::string::npos);
}

TEST_CASE("a trial whose child crashes ends crashed on the cluster, with its stderr", "[cluster]") {
  Cluster cluster;
  // Trial children that die of a signal after a word on stderr.
  const auto child = cluster.stand_in_child(
      "crasher.sh", "echo 'segmentation fault in the interpreter' >&2\nkill -SEGV $$\n");
  cluster.start_coordinator();
  cluster.start_worker(1, 1, {child});
  const std::string job = cluster.submit(cluster.outcome_batch(1));
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 4);
  CHECK(summary["crashed"] == 4);
  const auto results = cluster.results(job);
  require_exactly_once(cluster, results);
  for (const auto& r : results) {
    CHECK(r["outcome"] == "crashed");
    CHECK(r["exit_code"] == -11);
    CHECK(r["detail"].get<std::string>().find("segmentation fault in the interpreter") !=
          std::string::npos);
  }
}

TEST_CASE("a trial whose child a stop from outside kills runs again instead of ending crashed",
          "[cluster]") {
  Cluster cluster;
  // The first trial child dies of a SIGTERM, as when a cluster manager stops
  // the worker's job (scancel signals every process of it, the trials'
  // children first); the next runs the real child.
  const std::string once = (cluster.dir.path() / "stopped-once").string();
  const auto child = cluster.stand_in_child(
      "stopped.sh", "if mkdir " + once + " 2>/dev/null; then kill -TERM $$; fi\nexec " +
                        std::string(FORKTRIAL_CHILD_FOR_TESTS) + " <<END\n$job\nEND\n");
  cluster.start_coordinator();
  cluster.start_worker(1, 1, {child});
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 1);
  CHECK(summary["crashed"] == 0);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 1);
  CHECK(results[0]["outcome"] == "completed");
  CHECK(results[0]["attempts"] == 2);
  require_exactly_once(cluster, results);
  CHECK_THAT(cluster.log_text(),
             Catch::Contains("attempt 1 failed: worker w1: its child was stopped by SIGTERM from "
                             "outside the worker, not by the trial"));
}

TEST_CASE(
    "a worker stopped by SIGTERM mid-trial exits 0, leaves no child, and its trial runs "
    "again elsewhere",
    "[cluster]") {
  Cluster cluster;
  // A trial child that says its pid and sleeps well past the test.
  const std::string pid_file = (cluster.dir.path() / "child.pid").string();
  const auto sleeper =
      cluster.stand_in_child("sleeper.sh", "echo $$ > " + pid_file + "\nexec sleep 60\n");
  // A lease far longer than the test: the trial can run again only because
  // the worker said goodbye.
  cluster.start_coordinator("600");
  cluster.start_worker(1, 1, {sleeper});
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  pid_t child = 0;
  for (int i = 0; i < 1000 && child == 0; ++i) {
    std::ifstream(pid_file) >> child;
    if (child == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(child > 0);
  const int status = cluster.workers[0]->kill(SIGTERM);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The worker killed and reaped its child before it ended.
  const bool gone = ::kill(child, 0) == -1 && errno == ESRCH;
  CHECK(gone);
  // It said goodbye and heard the answer before it exited, so the
  // coordinator has lost it already and requeued its trial, its lease
  // notwithstanding.
  const std::string log = cluster.log_text();
  INFO(log);
  REQUIRE_THAT(log, Catch::Contains("said goodbye to the coordinator (stopped by SIGTERM)"));
  CHECK_THAT(log, Catch::Contains("worker w1 said goodbye (stopped by SIGTERM): lost now; 1 lease "
                                  "it held ended at once"));
  const json known = json::parse(cluster.client({"workers", "--json"}).out);
  REQUIRE(known["workers"].size() == 1);
  CHECK(known["workers"][0]["worker"] == "w1");
  CHECK(known["workers"][0]["alive"] == false);
  // Another worker runs the trial.
  cluster.start_worker(2);
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["reconciled"] == 1);
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 1);
  CHECK(results[0]["outcome"] == "completed");
  CHECK(results[0]["worker"] == "w2");
  CHECK(results[0]["attempts"] == 2);
  require_exactly_once(cluster, results);
}

TEST_CASE("a worker whose coordinator does not answer its goodbye stops all the same",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator("600");
  cluster.start_worker(1);
  for (int i = 0; i < 1000; ++i) {
    const json known = json::parse(cluster.client({"workers", "--json"}).out);
    if (!known["workers"].empty() && known["workers"][0]["alive"] == true) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_THAT(cluster.log_text(), Catch::Contains("worker w1 joined"));
  // A coordinator that reads nothing: the goodbye goes unanswered.
  cluster.coordinator->signal(SIGSTOP);
  const int status = cluster.workers[0]->kill(SIGTERM);
  cluster.coordinator->signal(SIGCONT);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(
      cluster.log_text(),
      Catch::Contains("the coordinator did not answer this worker's goodbye within 1000 ms"));
}

TEST_CASE("a refused submission stores no segment of its fork points", "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  const auto blobs = [&] {
    forktrial::store::EventStore store(cluster.store);
    std::set<std::string> digests;
    for (const auto& blob : store.snapshot().blobs()) digests.insert(blob.digest.str());
    return digests;
  };
  // Two trials: one at a fork point the parent has, one at an event it
  // lacks. The job is refused whole.
  std::string batch = forktrial::testing::read_file(cluster.outcome_batch(1, 2));
  const auto second = batch.find("evt_031", batch.find('\n'));
  REQUIRE(second != std::string::npos);
  batch.replace(second, 7, "evt_999");
  auto refused = cluster.client({"submit", cluster.dir.write("half.jsonl", batch).string()});
  INFO(refused.err);
  CHECK(refused.exit_code != 0);
  CHECK(contains(refused.err, "no event evt_999 in the history of run run_chat"));
  const auto after_refusal = blobs();  // the bundles its client uploaded, nothing else
  // The good trial alone is taken, and only now is its segment stored.
  cluster.submit(cluster.outcome_batch(1, 1));
  std::set<std::string> added;
  for (const auto& digest : blobs()) {
    if (!after_refusal.contains(digest)) added.insert(digest);
  }
  CHECK(added.size() == 1);
}

TEST_CASE("a job forked from a run the coordinator lacks is refused once, saying what to do",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  auto refused = cluster.client({"submit", cluster.outcome_batch(2, 4, "run_elsewhere")});
  CHECK(refused.exit_code != 0);
  CHECK(refused.out.empty());
  // Eight trials, one problem: listed once, with how many trials share it.
  CHECK(refused.err.find("trial 0 (and 7 more): no run run_elsewhere in the coordinator's store " +
                         cluster.store + "\n") != std::string::npos);
  // What to do is the command line's to say, once.
  CHECK(refused.err.find("\nimport each parent run the coordinator lacks into its store first, "
                         "on its host: forktrial run import FILE --store STORE --id RUN") !=
        std::string::npos);
  CHECK(forktrial::testing::lines_of(refused.err).size() == 3);
}

TEST_CASE("a batch file with problems is refused before anything is sent, saying what to do",
          "[cluster]") {
  forktrial::testing::TempDir dir;
  const auto file = dir.write("empty.toml", "# nothing yet\n");
  // No coordinator listens there: the file is refused first.
  auto refused = run_forktrial(
      {"submit", file.string(), "--coordinator", "tcp://127.0.0.1:9", "--timeout", "1"});
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.empty());
  CHECK_THAT(refused.err,
             Catch::Contains("has 3 problems; nothing was submitted:") &&
                 Catch::Contains("\n  run: missing; add run = \"<parent run id>\"\n") &&
                 Catch::Contains("\n`forktrial pack check DIR` lists every problem "
                                 "of a pack directory"));
}

TEST_CASE("cancel drops the queued trials of a job and the coordinator says so", "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  const std::string job = cluster.submit(cluster.outcome_batch(5));
  auto cancelled = cluster.client({"cancel", job, "--json"});
  INFO(cancelled.err);
  REQUIRE(cancelled.exit_code == 0);
  const json after = json::parse(cancelled.out);
  CHECK(after["status"]["cancelled"] == 20);
  CHECK(after["state"] == "cancelled");
  CHECK(after["dropped"] == json{{"cancelled", 20}, {"abandoned", 0}});
  const auto shown = cluster.client({"status", job});
  CHECK_THAT(shown.out, Catch::Contains("CANCELLED (20 trials dropped)") &&
                            Catch::Contains("[..............................] 20/20"));
  cluster.start_worker(1);
  auto waited = cluster.client({"wait", job, "--json"});
  CHECK(waited.exit_code == 1);  // cancelled: not every trial was reconciled
  CHECK(cluster.forks().empty());
  CHECK(cluster.log_text().find("job " + job + " cancelled") != std::string::npos);
}

TEST_CASE("malformed and hostile messages are answered with errors and the coordinator carries on",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  zmq::context_t context;
  zmq::socket_t peer = hand_made_peer(context, cluster.endpoint);
  // The error the coordinator answers `frame` with: its code and message.
  auto refusal = [&](const std::string& frame) {
    peer.send(zmq::buffer(frame), zmq::send_flags::none);
    zmq::message_t reply;
    REQUIRE(peer.recv(reply, zmq::recv_flags::none));
    auto decoded = forktrial::wire::decode(reply.to_string_view());
    REQUIRE(decoded);
    REQUIRE(decoded->envelope().which() == forktrial::schema::wire::Envelope::ERROR);
    const auto error = decoded->envelope().getError();
    return std::make_pair(error.getCode(), forktrial::wire::text(error.getMessage()));
  };
  auto answer = [&](const std::string& frame) { return refusal(frame).first; };
  using Code = forktrial::schema::wire::ErrorCode;
  std::mt19937 random(7);
  std::string noise(4096, '\0');
  for (auto& c : noise) c = static_cast<char>(random());
  CHECK(answer(noise) == Code::INVALID_ARGUMENT);
  CHECK(answer("short") == Code::INVALID_ARGUMENT);
  {
    capnp::MallocMessageBuilder message;
    forktrial::wire::start(message, 1).setVersion(99);
    CHECK(answer(forktrial::wire::encode(message)) == Code::INVALID_ARGUMENT);
  }
  {
    // A report before any hello, for a trial never assigned.
    capnp::MallocMessageBuilder message;
    auto ref = forktrial::wire::start(message, 2).initReport().initTrial();
    ref.setJob("job_none");
    ref.setIndex(3);
    ref.setAttempt(1);
    CHECK(answer(forktrial::wire::encode(message)) == Code::FAILED_PRECONDITION);
  }
  {
    // A worker whose id would write control characters into the log.
    capnp::MallocMessageBuilder message;
    auto hello = forktrial::wire::start(message, 7).initWorkerHello();
    hello.setWorkerId("w\x1b[2J");
    hello.setSlots(1);
    CHECK(answer(forktrial::wire::encode(message)) == Code::INVALID_ARGUMENT);
  }
  {
    // A client whose submitted trial names its candidate with a number.
    capnp::MallocMessageBuilder hello;
    forktrial::wire::start(hello, 3).setClientHello();
    peer.send(zmq::buffer(forktrial::wire::encode(hello)), zmq::send_flags::none);
    zmq::message_t ok;
    REQUIRE(peer.recv(ok, zmq::recv_flags::none));
    capnp::MallocMessageBuilder message;
    auto specs = forktrial::wire::start(message, 4).initSubmitJob().initSpecs(1);
    specs.set(0, R"({"candidate": 5, "spec": {"schema_version": 1, "parent_run_id": "run_chat",)"
                 R"( "at_event": "evt_031", "label": "x", "candidate": {"root_dir": "bundle:)" +
                     std::string(64, 'a') +
                     R"("}, "extra_packs": [], "scenario": "", "limits": {}}})");
    const auto [code, text] = refusal(forktrial::wire::encode(message));
    CHECK(code == Code::INVALID_ARGUMENT);
    CHECK(text ==
          "the job was not submitted:\n  trial 0: a submitted trial's \"candidate\" is a name (a "
          "string)");
  }
  {
    // A pack archive uploaded under the pin of another pack.
    auto archive = forktrial::pack::archive_pack(kExamples + "/packs/greeter");
    REQUIRE(archive);
    const auto digest = forktrial::Sha256::of(archive->bytes);
    peer.send(zmq::buffer(put_blob_frame(5, digest, archive->bytes)), zmq::send_flags::none);
    zmq::message_t ok;
    REQUIRE(peer.recv(ok, zmq::recv_flags::none));
    const auto other = forktrial::pack::bundle_hash(kExamples + "/packs/chat_echo");
    REQUIRE(other);
    capnp::MallocMessageBuilder message;
    auto specs = forktrial::wire::start(message, 6).initSubmitJob().initSpecs(1);
    specs.set(0, R"({"candidate": "greeter", "spec": {"schema_version": 1, "parent_run_id": )"
                 R"("run_chat", "at_event": "evt_031", "label": "x", "candidate": {"root_dir": )"
                 R"("bundle:)" +
                     digest.hex() + R"(", "expected_bundle_hash": ")" + other->str() +
                     R"("}, "extra_packs": [], "scenario": "", "limits": {}}})");
    const auto [code, text] = refusal(forktrial::wire::encode(message));
    INFO(text);
    CHECK(code == Code::INVALID_ARGUMENT);
    CHECK(text.find("holds a pack that hashes to " + archive->bundle_hash.str() +
                    ", not to its pin " + other->str()) != std::string::npos);

    // Under its own pin, with a candidate name that needs escaping in JSON,
    // the trial is accepted and its results name the candidate exactly.
    const std::string weird = "we\"ird\\name \u2713\n";
    capnp::MallocMessageBuilder accepted;
    auto good = forktrial::wire::start(accepted, 8).initSubmitJob().initSpecs(1);
    good.set(0, bundle_trial(weird, digest, archive->bundle_hash.str()));
    peer.send(zmq::buffer(forktrial::wire::encode(accepted)), zmq::send_flags::none);
    zmq::message_t reply;
    REQUIRE(peer.recv(reply, zmq::recv_flags::none));
    auto decoded = forktrial::wire::decode(reply.to_string_view());
    REQUIRE(decoded);
    REQUIRE(decoded->envelope().which() == forktrial::schema::wire::Envelope::JOB_ACCEPTED);
    const std::string job = forktrial::wire::text(decoded->envelope().getJobAccepted().getJob());
    const auto results = cluster.results(job);
    REQUIRE(results.size() == 1);
    CHECK(results[0]["candidate"] == weird);
    CHECK(results[0]["status"] == "queued");
  }
  {
    // A frame past the coordinator's limit is dropped by ZeroMQ itself; the
    // coordinator goes on answering.
    peer.send(zmq::buffer(std::string(std::size_t{300} << 20, 'x')), zmq::send_flags::none);
  }
  // Still serving: a real client gets its answers.
  auto status = cluster.client({"status", "--json"});
  INFO(status.err);
  CHECK(status.exit_code == 0);
  auto workers = cluster.client({"workers", "--json"});
  CHECK(workers.exit_code == 0);
  CHECK(json::parse(workers.out)["errors_answered"].get<int>() >= 4);
}

TEST_CASE("forktrial batch stops, saying so, when every worker it started has died", "[cluster]") {
  Cluster cluster;  // its store and a stand-in child; batch starts its own daemons
  const auto child = cluster.stand_in_child("killer.sh", "kill -9 $PPID\n");
  const auto batch = cluster.dir.write(
      "doomed.toml", "run = \"run_chat\"\nat = \"evt_031\"\nrepeat = 4\n[[candidates]]\npack = \"" +
                         kExamples + "/packs/greeter\"\n");
  auto ran =
      forktrial::testing::run_command({"env", child, FORKTRIAL_BINARY, "batch", batch.string(),
                                       "--store", cluster.store, "--workers", "2"},
                                      std::chrono::seconds(60));
  INFO(ran.out << ran.err);
  CHECK(ran.exit_code != 0);
  CHECK(ran.err.find("every worker of the batch died (signal 9, signal 9) with trials left") !=
        std::string::npos);
}

TEST_CASE("a store has one coordinator: another, or a batch, is refused at once, naming it",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  CHECK(cluster.wait(job)["completed"] == 1);
  auto second = forktrial::testing::run_command(
      {FORKTRIAL_BINARY, "coordinator", "--store", cluster.store, "--listen",
       "ipc://" + (cluster.dir.path() / "second.sock").string()},
      std::chrono::seconds(30));
  INFO(second.err);
  CHECK(second.exit_code != 0);
  CHECK_THAT(second.err, Catch::Contains("the store " + cluster.store +
                                         " is in use by another coordinator (pid ") &&
                             Catch::Contains("coordinator --store " + cluster.store));
  const auto batch = cluster.dir.write(
      "nightly.toml", "run = \"run_chat\"\nat = \"evt_031\"\n[[candidates]]\npack = \"" +
                          kExamples + "/packs/greeter\"\n");
  auto ran = forktrial::testing::run_command(
      {FORKTRIAL_BINARY, "batch", batch.string(), "--store", cluster.store, "--workers", "1"},
      std::chrono::seconds(60));
  INFO(ran.err);
  CHECK(ran.exit_code != 0);
  CHECK_THAT(ran.err, Catch::Contains("is in use by a coordinator (pid ") &&
                          Catch::Contains("submit the batch to that coordinator"));
  // Neither touched the store: its coordinator carries on, and one started
  // on it after it replays its log.
  const std::string next = cluster.submit(cluster.outcome_batch(1, 1));
  CHECK(cluster.wait(next)["completed"] == 1);
  cluster.coordinator.reset();
  cluster.start_coordinator();
  auto status = cluster.client({"status", "--json"});
  INFO(status.err << cluster.log_text());
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["jobs"].size() == 2);
}

namespace {

// Every live descendant of `root`, read from /proc (children, their
// children, ...): the processes a command started, and only those.
std::set<int> descendants_of(int root) {
  std::multimap<int, int> children;  // ppid -> pid
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');  // comm may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (state != 'Z') children.emplace(ppid, std::stoi(name));
  }
  std::set<int> found;
  std::deque<int> next{root};
  while (!next.empty()) {
    const int parent = next.front();
    next.pop_front();
    for (auto [it, end] = children.equal_range(parent); it != end; ++it) {
      if (found.insert(it->second).second) next.push_back(it->second);
    }
  }
  return found;
}

}  // namespace

TEST_CASE("Ctrl-C on forktrial batch cancels its job, stops what it started and leaves nothing",
          "[cluster]") {
  Cluster cluster;
  const auto tmp = cluster.dir.path() / "tmp";
  std::filesystem::create_directory(tmp);
  const auto err = cluster.dir.path() / "batch.err";
  // Trials that run until they are stopped.
  const auto child = cluster.stand_in_child("sleeper.sh", "sleep 300\n");
  const auto batch = cluster.dir.write(
      "long.toml", "run = \"run_chat\"\nat = \"evt_031\"\nrepeat = 6\n[[candidates]]\npack = \"" +
                       kExamples + "/packs/greeter\"\n");
  // Started as a shell starts a command in the foreground: a process group
  // of its own, which a terminal's Ctrl-C signals whole, with the default
  // dispositions of SIGINT and SIGTERM.
  const pid_t pid = forktrial::testing::spawn_as_shell(
      {FORKTRIAL_BINARY, "batch", batch.string(), "--store", cluster.store, "--workers", "2"},
      {child, "TMPDIR=" + tmp.string()}, err, true);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && ::kill(-pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};

  // Once both workers run a trial (a sleeping stand-in child each).
  std::set<int> started;
  for (int i = 0; i < 600; ++i) {
    started = descendants_of(pid);
    int sleeping = 0;
    for (int process : started) {
      std::ifstream comm("/proc/" + std::to_string(process) + "/comm");
      std::string name;
      std::getline(comm, name);
      sleeping += name == "sleep" ? 1 : 0;
    }
    if (sleeping == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string before = forktrial::testing::read_file(err);
  INFO(before);
  REQUIRE(before.find("trials on 2 workers") != std::string::npos);
  const std::string job = before.substr(before.find("job job_") + 4, 20);

  ::kill(-pid, SIGINT);  // as the terminal does
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 600 && !ended; ++i) {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string said = forktrial::testing::read_file(err);
  INFO(said);
  REQUIRE(ended);
  reaper.pid = 0;
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);  // a shell says 130
  CHECK_THAT(said, Catch::Contains("batch: stopping on SIGINT: cancelling job " + job) &&
                       Catch::Contains("batch: job " + job + " cancelled: ") &&
                       Catch::Contains("CANCELLED") &&
                       Catch::Contains("its scratch directory are gone"));
  CHECK(said.find("passing condition") == std::string::npos);
  // Everything it started has gone: coordinator, workers, trial children.
  for (int process : started) {
    INFO("process " << process);
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
      std::ifstream stat("/proc/" + std::to_string(process) + "/stat");
      std::string line;
      gone = !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(gone);
  }
  CHECK(std::filesystem::is_empty(tmp));
  // The store says the job was cancelled.
  cluster.start_coordinator();
  auto asked = cluster.client({"status", job, "--json"});
  INFO(asked.err);
  REQUIRE(asked.exit_code == 0);
  CHECK(json::parse(asked.out)["state"] == "cancelled");
}

namespace {

// Damages the orchestration log of `store` as a second coordinator on it
// did: a lease, by a worker this coordinator never knew, of `job`'s trial 0,
// which the log has already reconciled.
void lease_a_reconciled_trial(const std::string& store, const std::string& job) {
  namespace co = forktrial::coordinator;
  forktrial::store::EventStore events(store);
  const co::OrchestrationRecord lease = co::TrialLeased{
      co::TrialId{co::JobId(job), 0}, 1, co::WorkerId("local-0"), co::Instant{}, co::Instant{}};
  auto appended = events.write([&](forktrial::store::Writer& writer) {
    return co::append_to_log(writer, std::span(&lease, 1));
  });
  REQUIRE(appended);
}

}  // namespace

TEST_CASE("a log record that does not apply is set aside at start, said so, and repaired",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1);
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  REQUIRE(cluster.wait(job)["completed"] == 1);
  cluster.coordinator.reset();
  lease_a_reconciled_trial(cluster.store, job);

  // What is wrong, said without changing anything.
  auto checked = run_forktrial({"store", "check", "--store", cluster.store, "--json"});
  INFO(checked.err);
  CHECK(checked.exit_code == 1);
  const json report = json::parse(checked.out);
  CHECK(report["writer"].is_null());
  REQUIRE(report["set_aside"].size() == 1);
  CHECK(report["set_aside"][0]["type"] == "trial.leased");
  CHECK_THAT(report["set_aside"][0]["why"].get<std::string>(), Catch::Contains(job));
  CHECK(report["repaired"] == false);

  // The coordinator starts all the same, says what it set aside, and goes on.
  cluster.start_coordinator();
  auto status = cluster.client({"status", job, "--json"});
  INFO(status.err << cluster.log_text());
  REQUIRE(status.exit_code == 0);
  const json doc = json::parse(status.out);
  CHECK(doc["outcomes"]["completed"] == 1);
  REQUIRE(doc["log_set_aside"].size() == 1);
  CHECK(doc["log_set_aside"][0]["type"] == "trial.leased");
  const std::string next = cluster.submit(cluster.outcome_batch(1, 1));
  CHECK(cluster.wait(next)["completed"] == 1);
  CHECK(contains(cluster.log_text(), "set aside orchestration record"));
  cluster.coordinator.reset();
  // It compacted its log without the record: the store is whole again.
  auto clean = run_forktrial({"store", "check", "--store", cluster.store});
  INFO(clean.out << clean.err);
  CHECK(clean.exit_code == 0);
  CHECK(contains(clean.out, "none is set aside"));

  // Repaired offline, with no coordinator on the store.
  lease_a_reconciled_trial(cluster.store, job);
  auto repaired = run_forktrial({"store", "check", "--store", cluster.store, "--repair"});
  INFO(repaired.out << repaired.err);
  CHECK(repaired.exit_code == 0);
  CHECK(contains(repaired.out, "are set aside for good"));
  CHECK(run_forktrial({"store", "check", "--store", cluster.store}).exit_code == 0);
  // Both jobs' results read back after all of it.
  cluster.start_coordinator();
  CHECK(cluster.results(job).size() == 1);
  CHECK(cluster.results(next).size() == 1);
}

TEST_CASE("forktrial batch runs a batch file end to end on local workers", "[cluster]") {
  TempDir dir;
  const std::string store = (dir.path() / "store").string();
  REQUIRE(run_forktrial({"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id",
                         "run_chat"})
              .exit_code == 0);
  const auto batch = dir.write("nightly.toml",
                               "name = \"nightly\"\nrun = \"run_chat\"\n"
                               "at = [\"evt_009\", \"evt_031\"]\nrepeat = 3\n"
                               "[limits]\nwall_clock = \"20s\"\n"
                               "[[candidates]]\npack = \"" +
                                   kExamples +
                                   "/packs/chat_echo\"\n"
                                   "[[scenarios]]\nfile = \"scenarios/replay.lua\"\n");
  // Keys and an HTTP address meant for a cluster are not handed to the
  // batch's own daemons: its coordinator has no keys, and one port serves one.
  auto ran = forktrial::testing::run_command(
      {"/usr/bin/env", "FORKTRIAL_KEY=" + (dir.path() / "cluster.key").string(),
       "FORKTRIAL_COORDINATOR_KEY=" + (dir.path() / "coordinator.key.pub").string(),
       "FORKTRIAL_HTTP=127.0.0.1:" + std::to_string(forktrial::testing::free_port()),
       FORKTRIAL_BINARY, "batch", batch.string(), "--store", store, "--workers", "2", "--json"});
  INFO(ran.err);
  REQUIRE(ran.exit_code == 0);
  const auto lines = forktrial::testing::lines_of(ran.out);
  REQUIRE(lines.size() == 7);  // six results, then the summary
  for (std::size_t i = 0; i < 6; ++i) {
    const json r = json::parse(lines[i]);
    CHECK(r["outcome"] == "completed");
    CHECK(r["candidate"] == "chat_echo");
  }
  const json summary = json::parse(lines.back());
  CHECK(summary["reconciled"] == 6);
  CHECK(summary["completed"] == 6);
}

TEST_CASE("forktrial-full allocates with jemalloc unless built without it", "[cluster]") {
  // jemalloc prints its statistics at exit when MALLOC_CONF asks it to; the
  // glibc and sanitizer allocators ignore the variable. The daemons, the
  // trials and the store's commands run in forktrial-full, which the front
  // end runs for `preflight`; the front end's own commands use glibc's.
  auto run = forktrial::testing::run_command(
      {"/usr/bin/env", "MALLOC_CONF=stats_print:true", FORKTRIAL_BINARY, "preflight", "--help"});
  REQUIRE(run.exit_code == 0);
  const bool printed = run.err.find("Begin jemalloc statistics") != std::string::npos;
  CHECK(printed == (FORKTRIAL_JEMALLOC_LINKED != 0));
}

TEST_CASE("a submission past the coordinator's queue limit is refused whole, saying so",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator("3", {"--max-queued", "5"});
  // No worker: what is submitted stays queued.
  CHECK(!cluster.submit(cluster.outcome_batch(3, 1)).empty());
  const std::string more = cluster.outcome_batch(3, 1);
  auto refused = cluster.client({"submit", more, "--json"});
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains("the coordinator's queue is full: it holds 3 queued "
                                          "trials, and 3 more would pass its limit of 5 "
                                          "(--max-queued)"));
  CHECK(!cluster.submit(cluster.outcome_batch(2, 1)).empty());
  auto status = cluster.client({"status", "--json"});
  REQUIRE(status.exit_code == 0);
  const json jobs = json::parse(status.out)["jobs"];
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0]["total"].get<int>() + jobs[1]["total"].get<int>() == 5);
}

TEST_CASE("a reply the coordinator cannot deliver is counted and logged, not dropped unseen",
          "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  {
    zmq::context_t context;
    zmq::socket_t worker = hand_made_peer(context, cluster.endpoint);
    capnp::MallocMessageBuilder hello;
    auto h = forktrial::wire::start(hello, 1).initWorkerHello();
    h.setWorkerId("vanishing");
    h.setSlots(1);
    worker.send(zmq::buffer(forktrial::wire::encode(hello)), zmq::send_flags::none);
    zmq::message_t welcome;
    REQUIRE(worker.recv(welcome, zmq::recv_flags::none));
    // An offer with nothing queued waits at the coordinator for up to a
    // second; the worker is gone before its answer.
    capnp::MallocMessageBuilder offer;
    forktrial::wire::start(offer, 2).initRequestWork().setFreeSlots(1);
    worker.send(zmq::buffer(forktrial::wire::encode(offer)), zmq::send_flags::none);
  }
  json workers;
  for (int i = 0; i < 300; ++i) {
    auto listed = cluster.client({"workers", "--json"});
    REQUIRE(listed.exit_code == 0);
    workers = json::parse(listed.out);
    if (workers["replies_undelivered"].get<int>() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(workers["replies_undelivered"] == 1);
  CHECK_THAT(
      cluster.log_text(),
      Catch::Contains("a reply to worker vanishing was not delivered (it is gone); 1 so far"));
}

TEST_CASE("wait gives up after --max-wait with exit 3, and the job goes on", "[cluster]") {
  Cluster cluster;
  cluster.start_coordinator();
  // No worker yet: nothing can finish.
  const std::string job = cluster.submit(cluster.outcome_batch(2, 1));
  auto waited = cluster.client({"wait", job, "--max-wait", "0.5", "--json"});
  CHECK(waited.exit_code == 3);
  CHECK_THAT(waited.err,
             Catch::Contains("job " + job + " is not finished after 0.5 s (--max-wait)"));
  const json partial = json::parse(forktrial::testing::lines_of(waited.out).back());
  CHECK(partial["queued"] == 2);
  // The job was left alone: a worker finishes it, and a wait without a limit
  // sees it through.
  cluster.start_worker(1);
  CHECK(cluster.wait(job)["reconciled"] == 2);
}

// ---- CurveZMQ

namespace {

// A TCP relay in front of a loopback `target_port` that keeps every byte
// each connection carried, each way: what an eavesdropper on the wire would
// have. Given a network namespace, it runs there (its thread enters it) and
// listens on every address of it at `listen_port`; given `jitter`, it holds
// each chunk it relays a random 0..jitter longer than the one before it on
// the same connection and direction (order kept, as TCP keeps it).
// Where a TcpTap listens, and how it delays what it relays.
struct TapOptions {
  std::string netns;  // "": this process's namespace, on a loopback port
  int listen_port = 0;
  std::chrono::milliseconds jitter{0};
};

class TcpTap {
 public:
  struct Stream {
    std::string to_server;
    std::string to_client;
  };
  explicit TcpTap(int target_port, TapOptions options = {})
      : target_(target_port), options_(std::move(options)) {
    if (options_.netns.empty()) {
      listener_ = bound_loopback_socket(port_);
      REQUIRE(::listen(listener_, 16) == 0);
      thread_ = std::thread([this] { relay(); });
      return;
    }
    // A thread enters the namespace (the test's own thread stays where it
    // is), binds there, and says which port it has, or -1.
    std::promise<int> ready;
    auto port = ready.get_future();
    thread_ = std::thread([this, &ready] {
      const int ns = ::open(("/var/run/netns/" + options_.netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) {
        ready.set_value(-1);
        return;
      }
      ::close(ns);
      listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int on = 1;
      ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_ANY);
      address.sin_port = htons(static_cast<std::uint16_t>(options_.listen_port));
      const bool bound =
          ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
          ::listen(listener_, 16) == 0;
      port_ = bound ? options_.listen_port : -1;
      ready.set_value(port_);
      if (bound) relay();
    });
    if (port.get() < 0) {
      thread_.join();
      FAIL("the relay cannot listen in network namespace " << options_.netns);
    }
  }
  ~TcpTap() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
    for (auto& c : links_) {
      ::close(c.client);
      ::close(c.server);
    }
  }
  TcpTap(const TcpTap&) = delete;
  TcpTap& operator=(const TcpTap&) = delete;

  int port() const { return port_; }
  // Every connection's bytes so far.
  std::vector<Stream> streams() {
    std::lock_guard lock(mutex_);
    return streams_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    Clock::time_point due;
    std::string bytes;
  };
  struct Link {
    int client = -1;
    int server = -1;
    std::size_t stream = 0;
    std::deque<Held> held[2];  // [0]: to the server, [1]: to the client
    bool closing[2] = {false, false};
    bool ended[2] = {false, false};  // its sender closed: no more to read
  };

  // Writes what is due of each link's held chunks; how long until the next.
  std::chrono::milliseconds release() {
    auto next = std::chrono::milliseconds(50);
    const auto now = Clock::now();
    for (auto& l : links_) {
      for (int way = 0; way < 2; ++way) {
        auto& queue = l.held[way];
        while (!queue.empty() && queue.front().due <= now) {
          (void)!::write(way == 0 ? l.server : l.client, queue.front().bytes.data(),
                         queue.front().bytes.size());
          queue.pop_front();
        }
        if (!queue.empty()) {
          next =
              std::min(next, std::chrono::ceil<std::chrono::milliseconds>(queue.front().due - now));
        } else if (l.closing[way]) {
          ::shutdown(way == 0 ? l.server : l.client, SHUT_WR);
          l.closing[way] = false;
        }
      }
    }
    return next;
  }

  void relay() {
    std::mt19937_64 random(42);
    while (!stop_) {
      const auto wait = release();
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (const auto& l : links_) {
        fds.push_back({l.client, static_cast<short>(l.ended[0] ? 0 : POLLIN), 0});
        fds.push_back({l.server, static_cast<short>(l.ended[1] ? 0 : POLLIN), 0});
      }
      const int timeout = static_cast<int>(std::max<std::int64_t>(wait.count(), 1));
      if (::poll(fds.data(), fds.size(), timeout) <= 0) continue;
      if ((fds[0].revents & POLLIN) != 0) {
        const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        const int server = client >= 0 ? connect_loopback(target_) : -1;
        if (server >= 0) {
          std::lock_guard lock(mutex_);
          streams_.emplace_back();
          links_.push_back(
              {client, server, streams_.size() - 1, {}, {false, false}, {false, false}});
        } else if (client >= 0) {
          ::close(client);
        }
        continue;  // the descriptors changed
      }
      for (std::size_t i = 0; i < links_.size(); ++i) {
        for (const bool from_client : {true, false}) {
          const pollfd& p = fds[1 + 2 * i + (from_client ? 0 : 1)];
          if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          char buffer[65536];
          const ssize_t got = ::read(p.fd, buffer, sizeof buffer);
          Link& l = links_[i];
          const int way = from_client ? 0 : 1;
          if (got <= 0) {
            l.closing[way] = true;
            l.ended[way] = true;
            continue;
          }
          {
            std::lock_guard lock(mutex_);
            (from_client ? streams_[l.stream].to_server : streams_[l.stream].to_client)
                .append(buffer, static_cast<std::size_t>(got));
          }
          auto due = Clock::now();
          if (options_.jitter.count() > 0) {
            due += std::chrono::milliseconds(
                random() % static_cast<std::uint64_t>(options_.jitter.count() + 1));
          }
          if (!l.held[way].empty()) due = std::max(due, l.held[way].back().due);
          l.held[way].push_back({due, std::string(buffer, static_cast<std::size_t>(got))});
        }
      }
    }
  }

  int target_;
  TapOptions options_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<Stream> streams_;
  std::vector<Link> links_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("with keys, only listed keys get in, each in its own role", "[cluster][curve]") {
  Keys keys;
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  cluster.start_coordinator("3", keys.coordinator());
  cluster.start_worker(0, 1, {}, keys.as("worker"));
  const std::string batch = cluster.outcome_batch(2, 1);

  auto submitted = cluster.client(with({"submit", batch, "--wait", "--json"}, keys.as("client")));
  INFO(submitted.err);
  REQUIRE(submitted.exit_code == 0);
  CHECK(json::parse(forktrial::testing::lines_of(submitted.out).back())["completed"] == 2);

  auto quick = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"status", "--coordinator", cluster.endpoint, "--timeout", "2"};
    return run_forktrial(with(args, extra));
  };
  // No key: the handshake cannot even start, and the client says why at
  // once, not after its timeout.
  auto plain = run_forktrial({"status", "--coordinator", cluster.endpoint, "--timeout", "60"});
  CHECK(plain.exit_code != 0);
  CHECK(contains(plain.err, "speaks CurveZMQ and this client has no keys: give --key FILE"));
  // A key on no list: sent away, and the coordinator says so; so does the
  // client, at once, not after its timeout.
  auto stranger = run_forktrial(
      with({"status", "--coordinator", cluster.endpoint, "--timeout", "60"}, keys.as("stranger")));
  CHECK(stranger.exit_code != 0);
  CHECK(contains(stranger.err,
                 "refused this client's key: its public key is not in the "
                 "coordinator's --allow-clients"));
  CHECK_FALSE(contains(stranger.err, "did not answer"));
  // A worker with such a key exits 1, saying why, instead of waiting for ever.
  auto outsider = run_forktrial(with({"worker", "--connect", cluster.endpoint, "--cache",
                                      (cluster.dir.path() / "outsider").string()},
                                     keys.as("stranger")));
  CHECK(outsider.exit_code == 1);
  CHECK(contains(outsider.err,
                 "refused this worker's key (ZAP status 400): its public key is "
                 "not in the coordinator's --allow-workers"));
  // A worker's key used by a client: admitted as a worker, refused as a client.
  auto borrowed = quick(keys.as("worker"));
  CHECK(borrowed.exit_code != 0);
  CHECK(contains(borrowed.err, "this connection's key is a worker's"));
  // A client's key used by a worker: refused, and the worker exits 1.
  auto impostor = run_forktrial(with({"worker", "--connect", cluster.endpoint, "--cache",
                                      (cluster.dir.path() / "impostor").string()},
                                     keys.as("client")));
  CHECK(impostor.exit_code == 1);
  CHECK(contains(impostor.err, "refused this worker"));
  // The listed client still gets in.
  CHECK(quick(keys.as("client")).exit_code == 0);

  const std::string log = forktrial::testing::read_file(cluster.log);
  std::string stranger_key = forktrial::testing::read_file(keys.path("stranger.key.pub"));
  stranger_key = stranger_key.substr(stranger_key.find('"') + 1, 40);
  CHECK(contains(log, "refused a peer at 127.0.0.1: its key " + stranger_key));
}

TEST_CASE("a worker key bound to an id joins under that id alone, and no other key takes it",
          "[cluster][curve]") {
  Keys keys;
  REQUIRE(run_forktrial({"keygen", keys.path("other.key")}).exit_code == 0);
  auto key_of = [&](const std::string& pub) {
    const std::string text = forktrial::testing::read_file(keys.path(pub));
    return text.substr(text.find('"') + 1, 40);
  };
  keys.dir.write("workers.allow",
                 key_of("worker.key.pub") + " worker-id=node-1\n" + key_of("other.key.pub") + "\n");
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  cluster.start_coordinator("3", keys.coordinator());
  auto args = [&](const std::string& key, const std::string& id) {
    return with({"worker", "--connect", cluster.endpoint, "--cache",
                 (cluster.dir.path() / ("cache-" + id)).string(), "--id", id},
                keys.as(key));
  };
  auto worker = [&](const std::string& key, const std::string& id) {
    return run_forktrial(args(key, id));
  };
  // The bound key under another id, and another key under the bound id:
  // each refused, and the worker exits 1 saying why.
  auto wrong_id = worker("worker", "node-2");
  CHECK(wrong_id.exit_code == 1);
  CHECK(contains(wrong_id.err, "may join only as worker node-1"));
  auto taken = worker("other", "node-1");
  CHECK(taken.exit_code == 1);
  CHECK(contains(taken.err, "worker id node-1 is bound to another key"));
  // Under its own id, it joins and runs a job; the unbound key joins under any free id.
  cluster.workers.push_back(std::make_unique<Daemon>(args("worker", "node-1"), cluster.log));
  cluster.workers.push_back(std::make_unique<Daemon>(args("other", "node-7"), cluster.log));
  auto submitted = cluster.client(
      with({"submit", cluster.outcome_batch(2, 1), "--wait", "--json"}, keys.as("client")));
  INFO(submitted.err << cluster.log_text());
  REQUIRE(submitted.exit_code == 0);
  CHECK(json::parse(forktrial::testing::lines_of(submitted.out).back())["completed"] == 2);
  CHECK(contains(cluster.log_text(), "worker node-1 joined"));
  // The job may be over before the second worker has joined.
  CHECK(cluster.log_says("worker node-7 joined"));
}

TEST_CASE("with keys the wire is encrypted, and a replayed handshake gets nowhere",
          "[cluster][curve]") {
  Keys keys;
  const std::string marker = "marker-of-plaintext-7f3a";
  // The same submission through a tap, without keys and with them: the batch
  // name is on the wire in the clear only without.
  auto submit_through_tap = [&](Cluster& cluster, int port, bool curve) {
    cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(port);
    cluster.start_coordinator("3", curve ? keys.coordinator() : std::vector<std::string>{});
    TcpTap tap(port);
    const auto batch = cluster.dir.write(
        "b.toml", "name = \"" + marker + "\"\nrun = \"run_chat\"\nat = \"evt_031\"\n" +
                      "[[candidates]]\npack = \"" + kExamples + "/packs/greeter\"\n");
    auto submitted =
        run_forktrial(with({"submit", batch.string(), "--coordinator",
                            "tcp://127.0.0.1:" + std::to_string(tap.port()), "--timeout", "30"},
                           curve ? keys.as("client") : std::vector<std::string>{}));
    INFO(submitted.err);
    REQUIRE(submitted.exit_code == 0);
    return tap.streams();
  };
  {
    Cluster plain;
    const auto streams = submit_through_tap(plain, free_tcp_port(), false);
    REQUIRE(!streams.empty());
    CHECK(contains(streams.front().to_server, marker));
  }
  Cluster cluster;
  const int port = free_tcp_port();
  const auto streams = submit_through_tap(cluster, port, true);
  REQUIRE(!streams.empty());
  for (const auto& s : streams) {
    CHECK_FALSE(contains(s.to_server, marker));
    CHECK_FALSE(contains(s.to_client, marker));
    CHECK_FALSE(contains(s.to_client, "job_"));
  }
  // The recorded session got through its handshake (the server's READY
  // command), so its bytes are a whole handshake worth replaying.
  const auto& recorded = streams.front();
  REQUIRE(contains(recorded.to_client, std::string_view("\x05READY", 6)));

  // Replayed byte for byte on a new connection, the handshake fails at the
  // coordinator: it never sends READY, and closes the connection.
  const int fd = connect_loopback(port);
  REQUIRE(fd >= 0);
  (void)!::write(fd, recorded.to_server.data(), recorded.to_server.size());
  std::string answer;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) {
      closed = true;
    } else {
      answer.append(buffer, static_cast<std::size_t>(got));
    }
  }
  ::close(fd);
  CHECK(closed);
  CHECK_FALSE(contains(answer, std::string_view("\x05READY", 6)));
  // And nothing the replay carried was taken: still one job.
  const auto status = cluster.client(with({"status", "--json"}, keys.as("client")));
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["jobs"].size() == 1);
}

TEST_CASE("a coordinator open to the network without keys refuses to start unless --insecure",
          "[cluster][curve]") {
  Keys keys;
  TempDir dir;
  const std::string store = (dir.path() / "store").string();
  const std::string open = "tcp://0.0.0.0:" + std::to_string(free_tcp_port());
  auto refused = run_forktrial({"coordinator", "--store", store, "--listen", open});
  CHECK(refused.exit_code == 2);
  CHECK(contains(refused.err, "refusing to listen on " + open + " without keys"));
  // Allow lists without a key to check them against, and a key admitting
  // nobody, are mistakes too.
  auto lists_alone = run_forktrial({"coordinator", "--store", store, "--listen", open,
                                    "--allow-workers", keys.path("workers.allow")});
  CHECK(lists_alone.exit_code == 2);
  CHECK(contains(lists_alone.err, "need --key"));
  auto nobody = run_forktrial(
      {"coordinator", "--store", store, "--listen", open, "--key", keys.path("coordinator.key")});
  CHECK(nobody.exit_code == 2);
  CHECK(contains(nobody.err, "none is listed"));
  // A public key file is not a keypair.
  auto half = run_forktrial({"coordinator", "--store", store, "--listen", open, "--key",
                             keys.path("coordinator.key.pub"), "--allow-workers",
                             keys.path("workers.allow")});
  CHECK(half.exit_code == 2);
  CHECK(contains(half.err, "holds no secret-key"));
  CHECK(contains(half.err, "`forktrial keygen FILE` writes a keypair file"));
  // --insecure starts, and says so before anything else.
  const std::string log = (dir.path() / "insecure.log").string();
  {
    Daemon daemon({"coordinator", "--store", store, "--listen", open, "--insecure"}, log);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!contains(forktrial::testing::read_file(log), "coordinator listening on") &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const std::string said = forktrial::testing::read_file(log);
  CHECK(contains(said, "INSECURE: listening on " + open + " without keys"));
  CHECK(contains(said, "coordinator listening on " + open));
}

// ---- Real network faults: network namespaces and iptables

namespace {

constexpr const char* kIp = "/usr/sbin/ip";
constexpr const char* kIptables = "/usr/sbin/iptables";

bool run_quietly(const std::vector<std::string>& argv) {
  return forktrial::testing::run_command(argv, std::chrono::seconds(30)).exit_code == 0;
}

// The test's own hosts: network namespace 0 (the coordinator's) joined to
// each other namespace i by a veth pair, 10.77.i.1 on the coordinator's side
// and 10.77.i.2 on the peer's. Everything is removed when the test ends,
// whether it passed or not.
class Hosts {
 public:
  // Why namespaces cannot be used here, or nullopt when they can.
  static std::optional<std::string> unavailable() {
    if (::geteuid() != 0) return "not root: network namespaces need CAP_SYS_ADMIN";
    for (const char* tool : {kIp, kIptables}) {
      if (::access(tool, X_OK) != 0) return std::string(tool) + " is not installed";
    }
    const std::string probe = "ftprobe" + std::to_string(::getpid());
    if (!run_quietly({kIp, "netns", "add", probe})) return "`ip netns add` is not permitted";
    const bool filters = run_quietly({kIp, "netns", "exec", probe, kIptables, "-L", "-n"});
    run_quietly({kIp, "netns", "del", probe});
    if (!filters) return "iptables does not work in a network namespace here";
    return std::nullopt;
  }

  explicit Hosts(int count) {
    for (int i = 0; i < count; ++i) {
      names_.push_back("ft" + std::to_string(::getpid()) + "h" + std::to_string(i));
      REQUIRE(run_quietly({kIp, "netns", "add", names_.back()}));
      REQUIRE(run_quietly({kIp, "-n", names_.back(), "link", "set", "lo", "up"}));
    }
    for (int i = 1; i < count; ++i) {
      const std::string hub = "fth" + std::to_string(i);
      const std::string peer = "ftp" + std::to_string(i);
      REQUIRE(run_quietly({kIp, "-n", names_[0], "link", "add", hub, "type", "veth", "peer", "name",
                           peer, "netns", names_[i]}));
      REQUIRE(run_quietly(
          {kIp, "-n", names_[0], "addr", "add", coordinator_side(i) + "/24", "dev", hub}));
      REQUIRE(
          run_quietly({kIp, "-n", names_[i], "addr", "add", peer_side(i) + "/24", "dev", peer}));
      REQUIRE(run_quietly({kIp, "-n", names_[0], "link", "set", hub, "up"}));
      REQUIRE(run_quietly({kIp, "-n", names_[i], "link", "set", peer, "up"}));
    }
  }
  ~Hosts() {
    for (const auto& name : names_) run_quietly({kIp, "netns", "del", name});
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  std::vector<std::string> on(int i) const { return {kIp, "netns", "exec", names_.at(i)}; }
  const std::string& name(int i) const { return names_.at(i); }
  static std::string coordinator_side(int i) { return "10.77." + std::to_string(i) + ".1"; }
  static std::string peer_side(int i) { return "10.77." + std::to_string(i) + ".2"; }

  // Drops every packet between the coordinator and host i, both ways, or
  // lets them through again.
  void partition(int i, bool cut) {
    for (const char* chain : {"INPUT", "OUTPUT"}) {
      const bool in = std::string_view(chain) == "INPUT";
      REQUIRE(run_quietly({kIp, "netns", "exec", names_[0], kIptables, cut ? "-A" : "-D", chain,
                           in ? "-s" : "-d", peer_side(i), "-j", "DROP"}));
    }
  }

  // Drops `percent` of the packets each way on every link, at random.
  void lose(int percent) {
    const std::string probability =
        "0." + std::string(percent < 10 ? "0" : "") + std::to_string(percent);
    for (std::size_t i = 1; i < names_.size(); ++i) {
      for (const char* chain : {"INPUT", "OUTPUT"}) {
        REQUIRE(
            run_quietly({kIp, "netns", "exec", names_[i], kIptables, "-A", chain, "-m", "statistic",
                         "--mode", "random", "--probability", probability, "-j", "DROP"}));
      }
    }
  }

 private:
  std::vector<std::string> names_;
};

// A coordinator in host 0 on port 7600 with keys, and a worker in each other
// host, each running trials through `child` (an environment entry, or "").
struct NetCluster {
  Hosts hosts;  // first made, last removed: after every process in it is gone
  Keys keys;
  Cluster cluster;
  std::vector<std::unique_ptr<Daemon>> workers;
  // Workers reach the coordinator through this relay, at port 7601 of the
  // coordinator's host, when there is one.
  std::unique_ptr<TcpTap> relay;

  NetCluster(int worker_count, const std::string& lease) : hosts(worker_count + 1) {
    cluster.endpoint = "tcp://127.0.0.1:7600";
    cluster.client_prefix = hosts.on(0);
    cluster.client_extra = keys.as("client");
    cluster.coordinator =
        std::make_unique<Daemon>(with({"coordinator", "--store", cluster.store, "--listen",
                                       "tcp://0.0.0.0:7600", "--lease", lease},
                                      keys.coordinator()),
                                 cluster.log, std::vector<std::string>{}, hosts.on(0));
  }

  void start_worker(int host, const std::vector<std::string>& env) {
    workers.push_back(std::make_unique<Daemon>(
        with({"worker", "--connect",
              "tcp://" + Hosts::coordinator_side(host) + (relay ? ":7601" : ":7600"), "--cache",
              (cluster.dir.path() / ("cache-" + std::to_string(host))).string(), "--id",
              "w" + std::to_string(host)},
             keys.as("worker")),
        cluster.log, env, hosts.on(host)));
  }

  // The orchestration log's records of one type, as JSON.
  std::vector<json> records(const std::string& type) {
    auto listed = run_forktrial({"run", "events", "forktrial.orchestration", "--type", type,
                                 "--store", cluster.store, "--json", "--limit", "100000"});
    REQUIRE(listed.exit_code == 0);
    std::vector<json> out;
    for (const auto& line : forktrial::testing::lines_of(listed.out)) {
      out.push_back(json::parse(line));
    }
    return out;
  }
};

}  // namespace

TEST_CASE(
    "a worker cut off longer than its lease: its trials finish elsewhere, its late reports "
    "are fenced, nothing is reconciled twice",
    "[cluster][netns]") {
  if (const auto why = Hosts::unavailable()) {
    forktrial::testing::skip(*why);
    return;
  }
  NetCluster net(2, "2");
  // Trials of about a second, so that the cut lands while one runs.
  const auto child = net.cluster.stand_in_child(
      "slow.sh", "sleep 1\nexec " + std::string(FORKTRIAL_CHILD_FOR_TESTS) + " <<END\n$job\nEND\n");
  net.start_worker(1, {child});
  net.start_worker(2, {child});
  const std::string job = net.cluster.submit(net.cluster.outcome_batch(10, 1));
  // Cut worker 1 off while it runs a trial.
  bool running = false;
  std::string seen;
  for (int i = 0; i < 500 && !running; ++i) {
    auto listed = net.cluster.client({"workers", "--json"});
    seen = listed.out;
    if (listed.exit_code == 0) {
      const json workers = json::parse(listed.out);
      for (const auto& w : workers["workers"]) {
        running = running || (w["worker"] == "w1" && w["running"].get<int>() > 0);
      }
    }
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO(net.cluster.log_text() << seen);
  REQUIRE(running);
  net.hosts.partition(1, true);
  // Longer than the lease (2 s) and than the worker's patience with a silent
  // coordinator (5 s): the coordinator loses it, and it says hello again.
  std::this_thread::sleep_for(std::chrono::seconds(7));
  net.hosts.partition(1, false);

  const json summary = net.cluster.wait(job);
  INFO(summary.dump() << net.cluster.log_text());
  CHECK(summary["reconciled"] == 10);
  CHECK(summary["abandoned"] == 0);
  require_exactly_once(net.cluster, net.cluster.results(job));
  // The coordinator lost the worker and requeued what it held ...
  const auto lost = net.records("worker.lost");
  CHECK(std::any_of(lost.begin(), lost.end(),
                    [](const json& e) { return e["payload"]["worker"] == "w1"; }));
  const auto requeued = net.records("trial.requeued");
  CHECK(!requeued.empty());
  // ... and once the link healed, the reports of the attempts it had lost
  // arrived and were fenced. The worker's report goes out again after its
  // next hello, so wait for it a little.
  std::vector<json> fenced;
  for (int i = 0; i < 100 && fenced.empty(); ++i) {
    fenced = net.records("trial.fenced");
    if (fenced.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(!fenced.empty());
  for (const auto& f : fenced) CHECK(f["payload"]["worker"] == "w1");
}

TEST_CASE(
    "10% packet loss and up to 100 ms of jitter on every link: a batch completes exactly once",
    "[cluster][netns]") {
  if (const auto why = Hosts::unavailable()) {
    forktrial::testing::skip(*why);
    return;
  }
  NetCluster net(2, "5");
  net.hosts.lose(10);
  // This kernel has no netem: the jitter comes from a relay in the
  // coordinator's host, holding each chunk up to 100 ms.
  net.relay = std::make_unique<TcpTap>(
      7600, TapOptions{net.hosts.name(0), 7601, std::chrono::milliseconds(100)});
  net.start_worker(1, {});
  net.start_worker(2, {});
  // What it proves is that real connections carry a batch exactly once
  // through loss and jitter, not a pace: the same promise under every kind
  // of message fault, over millions of trials, is the simulation's
  // (simulation/simulator.h). The batch is sized to the build (a sanitized
  // one runs each trial several times slower), and the wait allows for a
  // busy machine.
#ifdef FORKTRIAL_SANITIZED
  constexpr int kTrials = 100;
#else
  constexpr int kTrials = 200;
#endif
  const std::string job = net.cluster.submit(net.cluster.outcome_batch(kTrials, 1));
  const json summary = net.cluster.wait(job, 240);  // within ctest's 300 s per test
  INFO(summary.dump() << net.cluster.log_text());
  CHECK(summary["reconciled"] == kTrials);
  CHECK(summary["completed"] == kTrials);
  CHECK(summary["abandoned"] == 0);
  require_exactly_once(net.cluster, net.cluster.results(job));
  // Both workers' links went through the relay.
  CHECK(net.relay->streams().size() >= 2);
}

TEST_CASE("a worker whose messages ZeroMQ will not queue says so, and sends them once it can",
          "[cluster]") {
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  // No coordinator yet: the hello waits in a queue of one, and the next
  // hello, 5 s later, finds it full.
  cluster.start_worker(1, 1, {}, {"--send-queue", "1"});
  auto logged = [&](const std::string& text) {
    for (int i = 0; i < 1000; ++i) {
      if (contains(cluster.log_text(), text)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  CHECK(
      logged("a message to the coordinator was not sent: ZeroMQ holds 1 it has not taken "
             "(--send-queue)"));
  cluster.start_coordinator();
  CHECK(logged("the coordinator takes messages again"));
  CHECK(logged("worker w1 joined"));
}

TEST_CASE("a worker started with --isolation strict says so in its hello and runs its trials",
          "[cluster][strict]") {
  Cluster cluster;
  cluster.start_coordinator();
  cluster.start_worker(1, 1, {}, {"--isolation", "strict"});
  const std::string job = cluster.submit(cluster.outcome_batch(1, 1));
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  CHECK(summary["completed"] == 1);
  const json known = json::parse(cluster.client({"workers", "--json"}).out);
  REQUIRE(known["workers"].size() == 1);
  const json& isolation = known["workers"][0]["isolation"];
  CHECK(isolation["level"] == "strict");
  CHECK(isolation["syscalls"]["how"].get<std::string>().find("seccomp") != std::string::npos);
  // Each result says which isolation its trial had, without asking the worker.
  const auto results = cluster.results(job);
  REQUIRE(results.size() == 1);
  CHECK(results[0]["isolation"]["level"] == "strict");
  REQUIRE(results[0]["isolation"]["nets"].size() == 11);
  CHECK(results[0]["isolation"]["nets"][8]["name"] == "seccomp");
}

TEST_CASE("forktrial batch --isolation strict hands the level to its workers' trial children",
          "[cluster][strict]") {
  Cluster cluster;  // its store and a stand-in child; batch starts its own daemons
  // Each trial's job is recorded, then the real child runs it.
  const std::string jobs = (cluster.dir.path() / "jobs.txt").string();
  const auto child = cluster.stand_in_child(
      "recorder.sh", "printf '%s\\n' \"$job\" >> " + jobs + "\nexec " +
                         std::string(FORKTRIAL_CHILD_FOR_TESTS) + " <<END\n$job\nEND\n");
  const auto batch = cluster.dir.write(
      "strict.toml", "run = \"run_chat\"\nat = \"evt_031\"\nrepeat = 2\n[[candidates]]\npack = \"" +
                         kExamples +
                         "/packs/greeter\"\n[[scenarios]]\nfile = \"scenarios/smoke.lua\"\n");
  auto ran = forktrial::testing::run_command(
      {"env", child, FORKTRIAL_BINARY, "batch", batch.string(), "--store", cluster.store,
       "--workers", "1", "--isolation", "strict", "--json"},
      std::chrono::seconds(120));
  INFO(ran.out << ran.err);
  REQUIRE(ran.exit_code == 0);
  const json summary = json::parse(forktrial::testing::lines_of(ran.out).back());
  CHECK(summary["completed"] == 2);
  const auto recorded = forktrial::testing::lines_of(cluster.read(jobs));
  REQUIRE(recorded.size() == 2);
  for (const auto& line : recorded) CHECK(json::parse(line)["strict"] == true);
}

// ---- Exhaustion: disks that fill

using forktrial::testing::SmallDisk;

TEST_CASE("a coordinator whose disk fills pauses, says why, loses nothing and resumes",
          "[cluster][exhaustion]") {
  if (auto why = SmallDisk::unavailable()) {
    forktrial::testing::skip(*why);
    return;
  }
  Cluster cluster;
  SmallDisk disk(cluster.dir.path() / "small", "64m");
  if (!disk.mounted()) {
    forktrial::testing::skip("mount -t tmpfs failed");
    return;
  }
  // The store, with the recorded run, moves onto the small disk.
  const std::string store = (disk.path() / "store").string();
  std::filesystem::copy(cluster.store, store);
  cluster.store = store;
  cluster.start_coordinator("3");
  cluster.start_worker(1);
  cluster.start_worker(2);
  const std::string job = cluster.submit(cluster.outcome_batch(15));
  CHECK(cluster.wait_until_done(job, 5) < 60);
  REQUIRE(disk.fill());

  // The next commit finds no room: the coordinator says so in its status.
  json status;
  for (int i = 0; i < 300; ++i) {
    auto asked = cluster.client({"status", "--json"});
    INFO(asked.err << cluster.log_text());
    REQUIRE(asked.exit_code == 0);
    status = json::parse(asked.out);
    if (status.contains("store_full")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(cluster.log_text());
  REQUIRE(status.contains("store_full"));
  CHECK_THAT(status["store_full"].get<std::string>(), Catch::Contains("has no room"));
  CHECK_THAT(cluster.log_text(), Catch::Contains("the store is full"));
  CHECK_THAT(cluster.log_text(),
             Catch::Contains("Paused: no leases, reconciliations or submissions"));
  auto shown = cluster.client({"status"});
  CHECK(shown.exit_code == 0);
  CHECK_THAT(shown.err, Catch::Contains("the coordinator's store is full"));

  // Paused: nothing more is reconciled, and a new job is refused, saying why.
  const std::uint64_t done = status["jobs"][0]["done"];
  auto refused = cluster.client({"submit", cluster.outcome_batch(1, 1), "--json"});
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Catch::Contains("the coordinator's store is full"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto later = cluster.client({"status", job, "--json"});
  REQUIRE(later.exit_code == 0);
  CHECK(json::parse(later.out)["done"] == done);

  // Room again: it resumes by itself and the job ends, every trial once.
  disk.make_room();
  const json summary = cluster.wait(job);
  INFO(summary.dump());
  CHECK(summary["reconciled"] == 60);
  CHECK(summary["abandoned"] == 0);
  CHECK_THAT(cluster.log_text(), Catch::Contains("the store has room again"));
  require_exactly_once(cluster, cluster.results(job));
  cluster.coordinator.reset();  // before the disk goes
  cluster.workers.clear();
}

TEST_CASE("coordinator and worker answer the probes of an orchestrator over --http", "[cluster]") {
  using forktrial::testing::http_wait_for;
  Cluster cluster;
  const auto coordinator_port = forktrial::testing::free_port();
  const auto worker_port = forktrial::testing::free_port();
  // The worker first: it lives, and is not ready until a coordinator welcomes it.
  cluster.start_worker(1, 1, {}, {"--http", "127.0.0.1:" + std::to_string(worker_port)});
  CHECK(http_wait_for(worker_port, "/healthz", 200).status == 200);
  const auto waiting = http_wait_for(worker_port, "/readyz", 503);
  CHECK(waiting.status == 503);
  CHECK(waiting.body.find("has not welcomed this worker") != std::string::npos);

  cluster.start_coordinator("3", {"--http", std::to_string(coordinator_port)});
  CHECK(http_wait_for(coordinator_port, "/healthz", 200).status == 200);
  CHECK(http_wait_for(coordinator_port, "/readyz", 200).status == 200);
  const auto ready = http_wait_for(worker_port, "/readyz", 200);
  INFO(cluster.log_text());
  CHECK(ready.status == 200);
  CHECK(forktrial::testing::http_get(coordinator_port, "/nothing").status == 404);
}

TEST_CASE("the HTTP endpoint refuses what is not an address, and a port already taken",
          "[cluster]") {
  Cluster cluster;
  auto bad = run_forktrial({"coordinator", "--store", cluster.store, "--listen", cluster.endpoint,
                            "--http", "example.com:80"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--http") != std::string::npos);
  CHECK(bad.err.find("not an IP address") != std::string::npos);

  const auto port = forktrial::testing::free_port();
  cluster.start_coordinator("3", {"--http", std::to_string(port)});
  REQUIRE(forktrial::testing::http_wait_for(port, "/healthz", 200).status == 200);
  auto taken =
      run_forktrial({"worker", "--connect", cluster.endpoint, "--cache",
                     (cluster.dir.path() / "cache-x").string(), "--http", std::to_string(port)});
  CHECK(taken.exit_code != 0);
  CHECK(taken.err.find("cannot serve HTTP on 127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
}

TEST_CASE(
    "after a batch the coordinator's /metrics count its outcomes and each worker's its trials",
    "[cluster][metrics]") {
  using forktrial::testing::http_get;
  using forktrial::testing::parse_exposition;
  Cluster cluster;
  const auto coordinator_port = forktrial::testing::free_port();
  cluster.start_coordinator("3", {"--http", std::to_string(coordinator_port)});
  std::vector<std::uint16_t> worker_ports;
  for (int n = 1; n <= 2; ++n) {
    worker_ports.push_back(forktrial::testing::free_port());
    cluster.start_worker(n, 2, {}, {"--http", std::to_string(worker_ports.back())});
  }
  for (const auto port : worker_ports) {
    REQUIRE(forktrial::testing::http_wait_for(port, "/readyz", 200).status == 200);
  }
  const std::string job = cluster.submit(cluster.outcome_batch(5));
  const json summary = cluster.wait(job);
  INFO(summary.dump() << cluster.log_text());
  REQUIRE(summary["reconciled"] == 20);
  // What `forktrial results` says, by outcome, and by worker and outcome.
  std::map<std::string, double> outcomes;
  std::map<std::string, std::map<std::string, double>> by_worker;
  for (const auto& r : cluster.results(job)) {
    ++outcomes[r["outcome"].get<std::string>()];
    ++by_worker[r["worker"].get<std::string>()][r["outcome"].get<std::string>()];
  }
  REQUIRE(outcomes.size() == 4);

  const auto scraped = http_get(coordinator_port, "/metrics");
  REQUIRE(scraped.status == 200);
  CHECK(scraped.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") !=
        std::string::npos);
  const auto coordinator = parse_exposition(scraped.body);
  INFO(scraped.body);
  REQUIRE(coordinator.has_value());
  for (const forktrial::Outcome outcome : forktrial::kOutcomes) {
    const std::string name(forktrial::outcome_name(outcome));
    INFO(name);
    CHECK(coordinator->at("forktrial_trials_reconciled_total{outcome=\"" + name + "\"}") ==
          outcomes[name]);
    CHECK(coordinator->at("forktrial_trial_duration_seconds_count{outcome=\"" + name + "\"}") ==
          outcomes[name]);
  }
  CHECK(coordinator->at("forktrial_trials{status=\"reconciled\"}") == 20);
  CHECK(coordinator->at("forktrial_trials{status=\"queued\"}") == 0);
  CHECK(coordinator->at("forktrial_reconciliation_duration_seconds_count") == 20);
  CHECK(coordinator->at("forktrial_trial_attempts_total") ==
        20 + coordinator->at("forktrial_trials_requeued_total"));
  CHECK_FALSE(coordinator->has("forktrial_job_queued_trials{job_id=\"" + job + "\"}"));
  CHECK(coordinator->at("forktrial_jobs{state=\"finished\"}") == 1);
  CHECK(coordinator->at("forktrial_jobs_submitted_total") == 1);
  CHECK(coordinator->at("forktrial_workers_alive") == 2);
  CHECK(coordinator->at("forktrial_cluster_slots") == 4);
  CHECK(coordinator->at("forktrial_store_bytes") > 0);
  CHECK(coordinator->at("process_open_fds") > 0);
  CHECK(coordinator->at("forktrial_blob_bytes_total{direction=\"uploaded\"}") > 0);

  double received = 0;
  for (int n = 1; n <= 2; ++n) {
    const auto answer = http_get(worker_ports[n - 1], "/metrics");
    REQUIRE(answer.status == 200);
    const auto worker = parse_exposition(answer.body);
    INFO("w" << n << "\n" << answer.body);
    REQUIRE(worker.has_value());
    const auto& ran = by_worker["w" + std::to_string(n)];
    for (const forktrial::Outcome outcome : forktrial::kOutcomes) {
      const std::string name(forktrial::outcome_name(outcome));
      const double expected = ran.contains(name) ? ran.at(name) : 0;
      CHECK(worker->at("forktrial_worker_trials_total{outcome=\"" + name + "\"}") == expected);
    }
    CHECK(worker->at("forktrial_worker_slots") == 2);
    CHECK(worker->at("process_resident_memory_bytes") > 0);
    if (!ran.empty()) {  // it fetched what its trials needed
      CHECK(worker->at("forktrial_worker_cache_misses_total") > 0);
      CHECK(worker->at("forktrial_worker_cache_bytes") > 0);
    }
    received += worker->at("forktrial_worker_blob_bytes_received_total");
  }
  // Every byte the coordinator served, a worker received.
  CHECK(coordinator->at("forktrial_blob_bytes_total{direction=\"served\"}") == received);
}

namespace {

// A copy of the greeter in a directory whose name, the candidate's name in a
// JSON Lines batch, is HTML that would run a script if it were taken as such.
constexpr const char* kHostileName = "<img src=x onerror=alert(1)>";
std::string hostile_greeter(Cluster& cluster) {
  const auto dir = cluster.dir.path() / kHostileName;
  std::filesystem::copy(kExamples + "/packs/greeter", dir,
                        std::filesystem::copy_options::recursive);
  return dir.string();
}

// The API's JSON: the body parsed, after checking it was sent as JSON.
json api_json(std::uint16_t port, const std::string& path, int status = 200) {
  const auto answer = forktrial::testing::http_get(port, path);
  INFO(path << ": " << answer.headers << "\n" << answer.body);
  REQUIRE(answer.status == status);
  CHECK_THAT(answer.headers, Catch::Contains("Content-Type: application/json"));
  CHECK_THAT(answer.headers, Catch::Contains("Content-Security-Policy: default-src 'self'"));
  return json::parse(answer.body);
}

json without(json doc, const std::string& key) {
  doc.erase(key);
  return doc;
}

// Starts the cluster's coordinator serving HTTP, and one worker of `slots`;
// the HTTP port, once it answers.
// `count` connections to the HTTP server on `port`, each having sent half a
// request and then nothing.
std::vector<int> hold_half_requests(std::uint16_t port, int count) {
  std::vector<int> held;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    const std::string half = "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    REQUIRE(::send(fd, half.data(), half.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(half.size()));
    held.push_back(fd);
  }
  return held;
}

std::uint16_t start_with_http(Cluster& cluster, unsigned slots) {
  const auto port = forktrial::testing::free_port();
  cluster.start_coordinator("3", {"--http", std::to_string(port)});
  cluster.start_worker(1, slots);
  REQUIRE(forktrial::testing::http_wait_for(port, "/healthz", 200).status == 200);
  return port;
}

}  // namespace

TEST_CASE("with client keys, the status API answers only where the operator alone reaches it",
          "[cluster][status][curve]") {
  Keys keys;
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  const auto port = forktrial::testing::free_port();
  const auto start = [&](const std::string& host, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--http", host + ":" + std::to_string(port)});
    cluster.start_coordinator("3", with(keys.coordinator(), extra));
    REQUIRE(forktrial::testing::http_wait_for(port, "/healthz", 200).status == 200);
  };
  // On every address: the probes, and /metrics, which names no job.
  start("0.0.0.0", {});
  CHECK(forktrial::testing::http_get(port, "/readyz").status == 200);
  CHECK(forktrial::testing::http_get(port, "/metrics").status == 200);
  for (const char* path : {"/api/jobs", "/api/workers", "/api/failures", "/api/job?id=job_x"}) {
    const json refused = api_json(port, path, 403);
    CHECK_THAT(refused["error"].get<std::string>(),
               Catch::Contains("has client keys, and its status API shows every client's jobs") &&
                   Catch::Contains("--http-private"));
  }
  // Declared private by its operator.
  start("0.0.0.0", {"--http-private"});
  CHECK_THAT(api_json(port, "/api/jobs")["view"].get<std::string>(),
             Catch::Contains("declared this address (0.0.0.0:" + std::to_string(port) +
                             ") private with --http-private"));
  // On loopback.
  start("127.0.0.1", {});
  CHECK_THAT(api_json(port, "/api/jobs")["view"].get<std::string>(),
             Catch::Contains("serves this page on a loopback address"));
  // Without keys every client is the same.
  cluster.start_coordinator("3", {"--http", std::to_string(port)});
  REQUIRE(forktrial::testing::http_wait_for(port, "/healthz", 200).status == 200);
  CHECK_THAT(api_json(port, "/api/jobs")["view"].get<std::string>(),
             Catch::Contains("has no client keys"));
}

TEST_CASE("the status API serves the coordinator's own status, workers, results and rankings",
          "[cluster][status]") {
  Cluster cluster;
  const auto port = start_with_http(cluster, 2);
  const std::string job =
      cluster.submit(cluster.outcome_batch(3, 4, "run_chat", hostile_greeter(cluster)));
  CHECK(cluster.wait(job)["reconciled"] == 12);

  // Jobs: the same objects `status --json` prints, every field alike (a
  // finished job's throughput is over its whole run, so it stays put).
  const json status = json::parse(cluster.client({"status", job, "--json"}).out);
  CHECK(status["submitted_at"].is_string());
  CHECK(status["finished_at"].is_string());
  CHECK(status["throughput"].get<double>() > 0);
  const json jobs = api_json(port, "/api/jobs");
  REQUIRE(jobs["jobs"].size() == 1);
  CHECK(jobs["jobs"][0] == status);
  CHECK(api_json(port, "/api/job?id=" + job) == status);

  // The ranking is `results --by candidate --json`, line for line.
  json ranking = json::array();
  for (const auto& line : forktrial::testing::lines_of(
           cluster.client({"results", job, "--by", "candidate", "--json"}).out)) {
    ranking.push_back(json::parse(line));
  }
  REQUIRE(ranking.size() == 4);
  const json candidates = api_json(port, "/api/candidates?job=" + job);
  CHECK(candidates["candidates"] == ranking);
  CHECK(candidates["candidates_total"] == 4);
  CHECK(candidates["total"] == 12);

  // Workers: `workers --json`, but for when each was last heard of.
  auto listed = json::parse(cluster.client({"workers", "--json"}).out);
  auto served = api_json(port, "/api/workers");
  REQUIRE(served["workers"].size() == 1);
  CHECK(without(served["workers"][0], "last_seen") == without(listed["workers"][0], "last_seen"));
  CHECK(served["workers"][0]["slots"] == 2);

  // Failures: each trial that did not complete, as its results line, with
  // when it ended; nothing else.
  std::map<std::string, json> failed;
  for (const auto& r : cluster.results(job)) {
    if (r["outcome"] != "completed") failed[r["trial"]] = r;
  }
  REQUIRE(failed.size() == 9);
  const json failures = api_json(port, "/api/failures");
  REQUIRE(failures["failures"].size() == failed.size());
  std::string last;
  for (const auto& failure : failures["failures"]) {
    INFO(failure.dump());
    REQUIRE(failed.contains(failure["trial"]));
    CHECK(without(failure, "ended_at") == failed[failure["trial"]]);
    // Newest first.
    if (!last.empty()) CHECK(failure["ended_at"].get<std::string>() <= last);
    last = failure["ended_at"];
  }
  CHECK(api_json(port, "/api/failures?job=" + job)["failures"] == failures["failures"]);
  // Another job's filter is no filter at all: it is refused, not empty.
  CHECK(api_json(port, "/api/failures?job=job_other", 404)["error"].get<std::string>().find(
            "no job job_other") == 0);
}

TEST_CASE(
    "the status page is the coordinator's own files under a policy of self only, and "
    "names that are HTML stay text",
    "[cluster][status]") {
  using forktrial::testing::http_get;
  using forktrial::testing::http_request;
  Cluster cluster;
  const auto port = start_with_http(cluster, 1);

  const std::string assets[][2] = {
      {"/", "text/html"}, {"/status.css", "text/css"}, {"/status.js", "text/javascript"}};
  for (const auto& [path, type] : assets) {
    const auto answer = http_get(port, path);
    INFO(path << ": " << answer.headers);
    CHECK(answer.status == 200);
    CHECK_THAT(answer.headers, Catch::Contains("Content-Type: " + type));
    CHECK_THAT(answer.headers, Catch::Contains("Content-Security-Policy: default-src 'self'"));
    // Nothing is fetched from anywhere else.
    CHECK(answer.body.find("http:") == std::string::npos);
    CHECK(answer.body.find("https:") == std::string::npos);
  }
  const auto page = http_get(port, "/").body;
  CHECK_THAT(page, Catch::Contains(R"(<script src="status.js" defer></script>)"));
  CHECK_THAT(page, Catch::Contains(R"(<link rel="stylesheet" href="status.css">)"));
  // The script writes data as text only.
  const auto script = http_get(port, "/status.js").body;
  CHECK(script.find("innerHTML") == std::string::npos);
  CHECK(script.find("insertAdjacentHTML") == std::string::npos);
  CHECK(script.find("document.write") == std::string::npos);

  // Unknown jobs are 404, a missing one 400, an unknown page 404.
  const std::string unknown = "no job job_nope: /api/jobs lists the jobs it knows";
  CHECK(api_json(port, "/api/job?id=job_nope", 404)["error"] == unknown);
  CHECK(api_json(port, "/api/candidates?job=job_nope", 404)["error"] == unknown);
  CHECK(api_json(port, "/api/failures?job=job_nope", 404)["error"] == unknown);
  CHECK(api_json(port, "/api/candidates", 400)["error"].get<std::string>().find("?job=JOB") !=
        std::string::npos);
  CHECK(api_json(port, "/api/job?id=", 400)["error"].get<std::string>().find("?id=JOB") !=
        std::string::npos);
  CHECK(api_json(port, "/api/failures?job=", 400)["error"].get<std::string>().find("?job=JOB") !=
        std::string::npos);
  CHECK(http_get(port, "/api/nothing").status == 404);
  CHECK(http_request(port, "POST", "/api/jobs").status == 405);
  const auto head = http_request(port, "HEAD", "/api/jobs");
  CHECK(head.status == 200);
  CHECK(head.body.empty());

  // A candidate named with HTML: the JSON carries it escaped, and it reads
  // back unchanged.
  const std::string job =
      cluster.submit(cluster.outcome_batch(1, 1, "run_chat", hostile_greeter(cluster)));
  cluster.wait(job);
  const auto raw = http_get(port, "/api/candidates?job=" + job);
  REQUIRE(raw.status == 200);
  CHECK(raw.body.find('<') == std::string::npos);
  CHECK(raw.body.find('>') == std::string::npos);
  CHECK_THAT(raw.body, Catch::Contains(R"(\u003cimg src=x onerror=alert(1)\u003e)"));
  CHECK(json::parse(raw.body)["candidates"][0]["candidate"] == kHostileName);
  // A job id given escaped in the query is decoded.
  CHECK(api_json(port, "/api/job?id=" + job.substr(0, 3) + "%5f" + job.substr(4))["job"] == job);
}

TEST_CASE("HTTP clients that hold their connections never hold the coordinator's loop",
          "[cluster][status]") {
  Cluster cluster;
  const auto port = start_with_http(cluster, 2);
  // More connections than the server has threads, each sending half a
  // request and then nothing: every HTTP thread waits on a client.
  const std::vector<int> held = hold_half_requests(port, 8);
  // The loop goes on: a job is uploaded, submitted and reported meanwhile...
  const std::string job = cluster.submit(cluster.outcome_batch(2, 1));
  CHECK(json::parse(cluster.client({"status", job, "--json"}).out)["total"] == 2);
  // ... while every connection is still held (the server closes one after
  // 10 s without a whole request).
  for (const int fd : held) {
    char byte = 0;
    const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    const int error = errno;
    CHECK(got == -1);
    CHECK(error == EAGAIN);
  }
  for (const int fd : held) ::close(fd);
  // Once they let go, the API answers again, and the job runs to its end.
  CHECK(forktrial::testing::http_wait_for(port, "/api/jobs", 200).status == 200);
  CHECK(cluster.wait(job)["reconciled"] == 2);
}

TEST_CASE("the health probes answer while slow clients hold every connection they can",
          "[cluster][status]") {
  Cluster cluster;
  const auto port = start_with_http(cluster, 1);
  // Six hundred connections, more than the server keeps open, each sending
  // half a request and then nothing.
  const std::vector<int> held = hold_half_requests(port, 600);
  // Every probe is answered, as an orchestrator's would be: the server never
  // waits on a client to serve another.
  for (int i = 0; i < 20; ++i) {
    CHECK(forktrial::testing::http_get(port, "/healthz").status == 200);
    CHECK(forktrial::testing::http_get(port, "/readyz").status == 200);
  }
  CHECK(forktrial::testing::http_get(port, "/api/jobs").status == 200);
  // The latest of the slow connections are still held: the probes did not
  // wait for them to go.
  for (std::size_t i = held.size() - 100; i < held.size(); ++i) {
    char byte = 0;
    const ssize_t got = ::recv(held[i], &byte, 1, MSG_DONTWAIT);
    const int error = errno;
    CHECK(got == -1);
    CHECK(error == EAGAIN);
  }
  for (const int fd : held) ::close(fd);
}

TEST_CASE("forktrial batch answers a deterministic trial run before from the cache, not running it",
          "[cluster][cache]") {
  Cluster cluster;  // its store; batch starts its own daemons
  // A child that counts the trials it runs, then runs them.
  const std::string counter = (cluster.dir.path() / "runs").string();
  const auto child = cluster.counting_child(counter);
  const auto runs = [&] { return Cluster::lines_in(counter); };
  const auto batch = [&](const std::string& name, int repeat) {
    return cluster.dir
        .write(name + ".toml", "name = \"" + name +
                                   "\"\nrun = \"run_chat\"\nat = [\"evt_009\", \"evt_031\"]\n"
                                   "repeat = " +
                                   std::to_string(repeat) + "\n[[candidates]]\npack = \"" +
                                   kExamples + "/packs/greeter\"\n")
        .string();
  };
  const auto run_batch = [&](const std::string& file, std::vector<std::string> extra) {
    std::vector<std::string> args{"env",     child,         FORKTRIAL_BINARY, "batch", file,
                                  "--store", cluster.store, "--workers",      "1",     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto ran = forktrial::testing::run_command(args, std::chrono::seconds(120));
    INFO(ran.out << ran.err);
    REQUIRE(ran.exit_code == 0);
    std::vector<json> lines;
    for (const auto& line : forktrial::testing::lines_of(ran.out))
      lines.push_back(json::parse(line));
    return lines;
  };

  const auto first = run_batch(batch("nightly", 1), {});
  REQUIRE(first.size() == 3);  // two results, then the summary
  CHECK(runs() == 2);
  CHECK(first[0]["cached_from"].is_null());
  CHECK(first[2]["cached"] == 0);

  // The same trials, in a batch of another name: answered, not run.
  const auto second = run_batch(batch("again", 1), {});
  REQUIRE(second.size() == 3);
  CHECK(runs() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO(second[i].dump());
    CHECK(second[i]["outcome"] == "completed");
    CHECK(second[i]["cached_from"] == first[i]["trial"]);
    CHECK(second[i]["events_appended"] == first[i]["events_appended"]);
    CHECK(second[i]["fork_run_id"] != first[i]["fork_run_id"]);
  }
  CHECK(second[2]["reconciled"] == 2);
  CHECK(second[2]["completed"] == 2);
  CHECK(second[2]["cached"] == 2);

  // --no-cache runs them; so are repeats run, every time.
  const auto forced = run_batch(batch("forced", 1), {"--no-cache"});
  CHECK(forced[0]["cached_from"].is_null());
  CHECK(runs() == 4);
  run_batch(batch("repeats", 2), {});
  CHECK(runs() == 8);
  run_batch(batch("repeats", 2), {});
  CHECK(runs() == 12);

  // The text output says which trial a cached result came from.
  auto text =
      forktrial::testing::run_command({"env", child, FORKTRIAL_BINARY, "batch", batch("text", 1),
                                       "--store", cluster.store, "--workers", "1"},
                                      std::chrono::seconds(120));
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(runs() == 12);
  CHECK_THAT(text.out, Catch::Contains("  cached from job_") &&
                           Catch::Contains("2 (answered from the result cache, not run)"));
  // And `status` of the job, on a coordinator of the same store, counts them.
  cluster.start_coordinator();
  const auto jobs = cluster.client({"status"});
  INFO(jobs.out << jobs.err);
  REQUIRE(jobs.exit_code == 0);
  CHECK_THAT(jobs.out, Catch::Contains("  cached 2"));
}

TEST_CASE("a resubmitted deterministic job is answered from the cache with idle workers waiting",
          "[cluster][cache]") {
  Cluster cluster;
  const std::string counter = (cluster.dir.path() / "runs").string();
  const auto child = cluster.counting_child(counter);
  const auto runs = [&] { return Cluster::lines_in(counter); };
  // Twelve trials of distinct keys: the greeter at twelve fork points.
  std::string points;
  for (int event = 20; event <= 31; ++event) {
    points += (points.empty() ? "\"evt_0" : ", \"evt_0") + std::to_string(event) + "\"";
  }
  const auto batch = [&](const std::string& name) {
    return cluster.dir
        .write(name + ".toml", "name = \"" + name + "\"\nrun = \"run_chat\"\nat = [" + points +
                                   "]\n[[candidates]]\npack = \"" + kExamples +
                                   "/packs/greeter\"\n")
        .string();
  };
  cluster.start_coordinator();
  cluster.start_worker(1, 2, {child});
  cluster.start_worker(2, 2, {child});
  const std::string first = cluster.submit(batch("first"));
  REQUIRE(cluster.wait(first)["completed"] == 12);
  REQUIRE(runs() == 12);
  // Both workers wait with offers parked at the coordinator now; the same
  // trials again are answered when the job is recorded, before an offer
  // can take one.
  for (int round = 0; round < 3; ++round) {
    const std::string again = cluster.submit(batch("again" + std::to_string(round)));
    const json summary = cluster.wait(again);
    INFO(summary.dump());
    CHECK(summary["completed"] == 12);
    CHECK(summary["cached"] == 12);
  }
  CHECK(runs() == 12);
}
