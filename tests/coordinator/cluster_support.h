// The real cluster of the tests: `forktrial` daemons (coordinator, workers)
// on an ipc or loopback endpoint, the command line's clients, hand-made peers
// built from the wire schema, and CurveZMQ keys. Shared by the cluster tests
// and the rogue-peer tests.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "pack/bundle_archive.h"
#include "pack/bundle_hash.h"
#include "schema/wire_codec.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace forktrial::testing::cluster {

using forktrial::testing::run_forktrial;
using forktrial::testing::TempDir;
using json = nlohmann::json;

inline const std::string kExamples = FORKTRIAL_SOURCE_DIR "/examples";

// A `forktrial` daemon of the test, killed (SIGKILL) and reaped when it goes.
class Daemon {
 public:
  // `prefix`: a command to run forktrial under (a namespace's `ip netns
  // exec NS`), or none.
  Daemon(std::vector<std::string> args, const std::string& log,
         std::vector<std::string> extra_env = {}, std::vector<std::string> prefix = {}) {
    std::vector<std::string> env_text(extra_env);
    for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    args.insert(args.begin(), FORKTRIAL_BINARY);
    args.insert(args.begin(), prefix.begin(), prefix.end());
    const std::string program = args.front();
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    REQUIRE(::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), envp.data()) ==
            0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Daemon() { kill(SIGKILL); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Sends `signal` and leaves the daemon be (SIGSTOP, SIGCONT).
  void signal(int signal) {
    if (pid_ > 0) ::kill(pid_, signal);
  }

  // Sends `signal` and reaps the daemon; its wait status.
  int kill(int signal) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }

 private:
  pid_t pid_ = 0;
};

// A coordinator, workers and a store holding the recorded chat run.
struct Cluster {
  TempDir dir;
  std::string store = (dir.path() / "store").string();
  std::string endpoint = "ipc://" + (dir.path() / "coordinator.sock").string();
  std::string log = (dir.path() / "daemons.log").string();
  std::unique_ptr<Daemon> coordinator;
  std::vector<std::unique_ptr<Daemon>> workers;

  Cluster() {
    auto imported = run_forktrial(
        {"run", "import", kExamples + "/runs/chat.jsonl", "--store", store, "--id", "run_chat"});
    REQUIRE(imported.exit_code == 0);
  }

  void start_coordinator(const std::string& lease = "3", std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"coordinator", "--store", store, "--listen",
                                  endpoint,      "--lease", lease};
    args.insert(args.end(), extra.begin(), extra.end());
    // The one before is gone before this one starts: a store has one
    // coordinator at a time (store/writer_lock.h).
    coordinator.reset();
    coordinator = std::make_unique<Daemon>(std::move(args), log);
  }
  void start_worker(int n, unsigned slots = 1, std::vector<std::string> env = {},
                    std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"worker",
                                  "--connect",
                                  endpoint,
                                  "--cache",
                                  (dir.path() / ("cache-" + std::to_string(n))).string(),
                                  "--slots",
                                  std::to_string(slots),
                                  "--id",
                                  "w" + std::to_string(n)};
    args.insert(args.end(), extra.begin(), extra.end());
    workers.push_back(std::make_unique<Daemon>(std::move(args), log, std::move(env)));
  }

  // Clients run under this command (a network namespace's `ip netns exec`)
  // and with these arguments (keys) added, when set.
  std::vector<std::string> client_prefix;
  std::vector<std::string> client_extra;

  forktrial::testing::CommandResult client(std::vector<std::string> args) {
    args.insert(args.end(), {"--coordinator", endpoint, "--timeout", "30"});
    args.insert(args.end(), client_extra.begin(), client_extra.end());
    if (client_prefix.empty()) return run_forktrial(std::move(args));
    args.insert(args.begin(), FORKTRIAL_BINARY);
    args.insert(args.begin(), client_prefix.begin(), client_prefix.end());
    return forktrial::testing::run_command(args);
  }

  // A JSON Lines batch: `per_kind` trials of each of four outcomes, forked
  // from `parent` at evt_031; with `kinds` = 1, the greeter's only. The
  // greeter is read from `greeter` (its directory's name is the candidate's
  // name) when given.
  std::string outcome_batch(int per_kind, int kinds = 4, const std::string& parent = "run_chat",
                            const std::string& greeter = "") {
    auto spec = [&](const std::string& pack, const std::string& scenario, int max_events) {
      const std::string root =
          pack == "packs/greeter" && !greeter.empty() ? greeter : kExamples + "/" + pack;
      return json{{"schema_version", 1},
                  {"parent_run_id", parent},
                  {"at_event", "evt_031"},
                  {"label", pack},
                  {"candidate", {{"root_dir", root}}},
                  {"extra_packs", json::array()},
                  {"scenario", scenario},
                  {"limits", {{"wall_clock_seconds", 20}, {"max_events", max_events}}}}
                 .dump() +
             "\n";
    };
    const std::string all[] = {spec("packs/greeter", "scenarios/smoke.lua", 2000),
                               spec("candidates/flaky_replies", "scenarios/check.lua", 2000),
                               spec("candidates/runaway", "scenarios/start.lua", 200),
                               spec("candidates/undeclared", "scenarios/main.lua", 2000)};
    std::string text;
    for (int i = 0; i < per_kind; ++i) {
      for (int kind = 0; kind < kinds; ++kind) text += all[kind];
    }
    return dir.write("batch.jsonl", text).string();
  }

  // A stand-in trial child for workers (give it as FORKTRIAL_CHILD): the
  // worker's start-up probe gets the real child, so the worker joins; every
  // trial runs the shell `body` instead, with the job in $job, as the
  // worker's child (exec keeps the worker its parent).
  std::string stand_in_child(const std::string& name, const std::string& body) {
    const auto path = dir.write(name,
                                "#!/bin/sh\n"
                                "job=$(cat)\n"
                                "case \"$job\" in *'\"preflight\":true'*) exec " +
                                    std::string(FORKTRIAL_CHILD_FOR_TESTS) +
                                    " <<END\n$job\nEND\n;; esac\n" + body);
    ::chmod(path.c_str(), 0755);
    return "FORKTRIAL_CHILD=" + path.string();
  }

  // A stand-in child (as stand_in_child) that adds a line to `counter` for
  // each trial it runs, then runs it with the real child; and how many lines
  // `counter` holds.
  std::string counting_child(const std::string& counter) {
    return stand_in_child("counting.sh", "echo ran >> " + counter + "\nexec " +
                                             std::string(FORKTRIAL_CHILD_FOR_TESTS) +
                                             " <<END\n$job\nEND\n");
  }
  static long lines_in(const std::string& counter) {
    std::ifstream in(counter);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  }

  std::string submit(const std::string& batch) {
    auto submitted = client({"submit", batch, "--json"});
    INFO(submitted.err);
    REQUIRE(submitted.exit_code == 0);
    return json::parse(submitted.out)["job"];
  }

  // Polls until at least `done` trials of the job are done; how many are.
  std::uint64_t wait_until_done(const std::string& job, std::uint64_t done) {
    for (int i = 0; i < 1000; ++i) {
      auto status = client({"status", job, "--json"});
      if (status.exit_code == 0) {
        const std::uint64_t now = json::parse(status.out)["done"];
        if (now >= done) return now;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("the job never had " << done << " trials done");
    return 0;
  }

  // The job's summary once it finished. A job still running after
  // `max_wait_seconds` (before the client is killed), or a client that gave
  // up, fails the test with what the daemons logged, which tells why.
  json wait(const std::string& job, int max_wait_seconds = 100) {
    auto waited = client({"wait", job, "--json", "--max-wait", std::to_string(max_wait_seconds)});
    INFO(waited.err);
    const auto lines = forktrial::testing::lines_of(waited.out);
    if (lines.empty() || waited.exit_code == 3) {
      INFO("daemons: " << log_text());
      FAIL("forktrial wait exited " << waited.exit_code << " with " << lines.size()
                                    << " lines: the job did not finish");
    }
    return json::parse(lines.back());
  }

  std::vector<json> results(const std::string& job) {
    auto listed = client({"results", job, "--json"});
    INFO(listed.err);
    REQUIRE(listed.exit_code == 0);
    std::vector<json> out;
    for (const auto& line : forktrial::testing::lines_of(listed.out))
      out.push_back(json::parse(line));
    return out;
  }

  // Every fork of run_chat in the store, by run id.
  std::map<std::string, json> forks() {
    auto listed = run_forktrial({"run", "ls", "--store", store, "--json", "--all"});
    REQUIRE(listed.exit_code == 0);
    std::map<std::string, json> out;
    for (const auto& run : json::parse(listed.out)) {
      if (run["parent"].is_object() && run["parent"]["run"] == "run_chat") {
        out[run["id"]] = run;
      }
    }
    return out;
  }

  std::string read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string log_text() {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Whether the daemons' log says `text` within 30 s (polled).
  bool log_says(const std::string& text) {
    for (int i = 0; i < 3000; ++i) {
      if (log_text().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

// A hand-made peer of the coordinator at `endpoint`: a DEALER socket that
// waits up to 10 s for an answer.
inline zmq::socket_t hand_made_peer(zmq::context_t& context, const std::string& endpoint) {
  zmq::socket_t peer(context, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(endpoint);
  return peer;
}

// A putBlob message uploading `bytes` whole under `digest`.
inline std::string put_blob_frame(std::uint64_t request, const forktrial::Digest& digest,
                                  const std::string& bytes) {
  capnp::MallocMessageBuilder upload;
  auto chunk = forktrial::wire::start(upload, request).initPutBlob();
  forktrial::wire::set_digest(chunk.initDigest(), digest);
  chunk.setTotalSize(bytes.size());
  chunk.setOffset(0);
  chunk.setBytes(
      capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
  return forktrial::wire::encode(upload);
}

// A submitted trial of the pack archived as `archive`, pinned to `pin`,
// forked from run_chat at evt_031, its candidate named `candidate`.
inline std::string bundle_trial(const json& candidate, const forktrial::Digest& archive,
                                const std::string& pin) {
  return json{
      {"candidate", candidate},
      {"spec",
       {{"schema_version", 1},
        {"parent_run_id", "run_chat"},
        {"at_event", "evt_031"},
        {"label", "x"},
        {"candidate", {{"root_dir", "bundle:" + archive.hex()}, {"expected_bundle_hash", pin}}},
        {"extra_packs", json::array()},
        {"scenario", ""},
        {"limits", json::object()}}}}
      .dump();
}

// Every reconciled result has its fork, with the reported counts, and no
// fork is left over: one fork per trial.
inline void require_exactly_once(Cluster& cluster, const std::vector<json>& results) {
  auto forks = cluster.forks();
  std::set<std::string> seen;
  for (const auto& r : results) {
    INFO(r.dump());
    REQUIRE(r["status"] == "reconciled");
    const std::string fork = r["fork_run_id"];
    REQUIRE(seen.insert(fork).second);
    REQUIRE(forks.contains(fork));
    const std::uint64_t own = forks[fork]["events"].get<std::uint64_t>() - 31;
    REQUIRE(own == r["events_appended"].get<std::uint64_t>());
  }
  CHECK(forks.size() == results.size());
}

// A TCP socket bound to an ephemeral loopback port; sets `port`.
inline int bound_loopback_socket(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t size = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  port = ntohs(address.sin_port);
  return fd;
}

// A loopback TCP port nobody listens on now.
inline int free_tcp_port() {
  int port = 0;
  ::close(bound_loopback_socket(port));
  return port;
}

inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Keypairs written by `forktrial keygen`, and allow lists of their public
// halves.
struct Keys {
  TempDir dir;
  std::string path(const std::string& name) const { return (dir.path() / name).string(); }
  Keys() {
    for (const char* name : {"coordinator.key", "worker.key", "client.key", "stranger.key"}) {
      REQUIRE(run_forktrial({"keygen", path(name)}).exit_code == 0);
    }
    dir.write("workers.allow", forktrial::testing::read_file(path("worker.key.pub")));
    dir.write("clients.allow",
              "# the command line\n" + forktrial::testing::read_file(path("client.key.pub")));
  }
  std::vector<std::string> coordinator() const {
    return {"--key",           path("coordinator.key"), "--allow-workers", path("workers.allow"),
            "--allow-clients", path("clients.allow")};
  }
  std::vector<std::string> as(const std::string& who) const {
    return {"--key", path(who + ".key"), "--coordinator-key", path("coordinator.key.pub")};
  }
};

inline std::vector<std::string> with(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

inline bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace forktrial::testing::cluster
