// A compromised worker and a hostile client against a real coordinator: each
// peer here is hand-built from the wire schema, says what an honest one
// never would, and must not crash the coordinator, poison what other clients
// read, or get anything recorded that a local parent would refuse from its
// child. Run without keys and with CurveZMQ keys.
#include <capnp/message.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "coordinator/client.h"
#include "schema/outcome.h"
#include "schema/wire_codec.h"
#include "tests/coordinator/cluster_support.h"
#include "tests/support/temp_dir.h"
#include "transport/curve.h"

using namespace forktrial::testing::cluster;
namespace wire = forktrial::wire;
using Envelope = forktrial::schema::wire::Envelope;
using forktrial::Outcome;

namespace {

// A trial as a worker holds it: its reference, copied out of the message.
struct Leased {
  std::string job;
  std::uint32_t index = 0;
  std::uint32_t attempt = 0;
};

// One event of a forged delta; its actor and cause are set when not empty.
struct Forged {
  std::string id;
  std::string type = "chat.note";
  std::string payload = "{}";
  std::string actor = "candidate";
  std::string caused_by = "";
  std::string timestamp = "2026-01-05T09:00:36Z";
};

// A hand-built peer of the coordinator, with CURVE keys when `keys` is given
// (as `who`, a keypair of Keys).
class Peer {
 public:
  Peer(const std::string& endpoint, const Keys* keys, const std::string& who = "worker")
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 20000);
    socket_.set(zmq::sockopt::sndtimeo, 20000);
    if (keys != nullptr) {
      auto own = forktrial::transport::read_keypair(keys->path(who + ".key"));
      REQUIRE(own);
      auto server = forktrial::transport::read_public_key(keys->path("coordinator.key.pub"));
      REQUIRE(server);
      forktrial::transport::make_curve_client(socket_, {*own, *server});
    }
    socket_.connect(endpoint);
  }

  void send(capnp::MallocMessageBuilder& message) { send(wire::encode(message)); }
  void send(const std::string& frame) {
    REQUIRE(socket_.send(zmq::buffer(frame), zmq::send_flags::none));
  }

  // The next message; heartbeat answers and others not asked for are skipped
  // unless `which` is an error.
  wire::Frame next(Envelope::Which which) {
    for (;;) {
      zmq::message_t reply;
      REQUIRE(socket_.recv(reply, zmq::recv_flags::none));
      auto decoded = wire::decode(reply.to_string_view());
      REQUIRE(decoded);
      const auto arm = decoded->envelope().which();
      if (arm == which) return std::move(*decoded);
      if (arm == Envelope::ERROR) {
        FAIL("the coordinator answered an error: "
             << wire::text(decoded->envelope().getError().getMessage()));
      }
    }
  }

  // The next message, whatever it is.
  wire::Frame next_any() {
    zmq::message_t reply;
    REQUIRE(socket_.recv(reply, zmq::recv_flags::none));
    auto decoded = wire::decode(reply.to_string_view());
    REQUIRE(decoded);
    return std::move(*decoded);
  }

  // The error code and message the coordinator answers `frame` with.
  std::pair<forktrial::schema::wire::ErrorCode, std::string> refusal(const std::string& frame) {
    send(frame);
    zmq::message_t reply;
    REQUIRE(socket_.recv(reply, zmq::recv_flags::none));
    auto decoded = wire::decode(reply.to_string_view());
    REQUIRE(decoded);
    REQUIRE(decoded->envelope().which() == Envelope::ERROR);
    const auto error = decoded->envelope().getError();
    return {error.getCode(), wire::text(error.getMessage())};
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

// A compromised worker: joins as `id`, leases trials and reports whatever a
// test makes it.
// An acknowledgement's verdict, and its reason after ": " when it has one.
std::string verdict_of(const wire::Frame& ack) {
  const auto read = ack.envelope().getReportAck();
  const std::string reason = wire::text(read.getReason());
  return wire::verdict_name(read.getVerdict()) + (reason.empty() ? "" : ": " + reason);
}

class RogueWorker : public Peer {
 public:
  RogueWorker(const std::string& endpoint, const std::string& id, const Keys* keys = nullptr,
              const std::vector<std::string>& warnings = {}, std::uint32_t slots = 64)
      : Peer(endpoint, keys) {
    capnp::MallocMessageBuilder hello;
    auto h = wire::start(hello, request_++).initWorkerHello();
    h.setWorkerId(id);
    h.setSlots(slots);
    auto list = h.initWarnings(static_cast<unsigned>(warnings.size()));
    for (unsigned i = 0; i < warnings.size(); ++i) {
      list.set(i, capnp::Text::Reader(warnings[i].data(), warnings[i].size()));
    }
    send(hello);
    next(Envelope::WELCOME);
  }

  // Leases `count` trials, asking until the coordinator has given them all.
  std::vector<Leased> lease(std::size_t count) {
    std::vector<Leased> out;
    while (out.size() < count) {
      capnp::MallocMessageBuilder message;
      wire::start(message, request_++)
          .initRequestWork()
          .setFreeSlots(static_cast<std::uint32_t>(count - out.size()));
      send(message);
      auto answer = next(Envelope::ASSIGNMENTS);
      for (auto a : answer.envelope().getAssignments().getAssignments()) {
        out.push_back({wire::text(a.getTrial().getJob()), a.getTrial().getIndex(),
                       a.getTrial().getAttempt()});
      }
    }
    return out;
  }

  // Reports `trial` as `outcome` with `events`, after `shape` set the rest;
  // the coordinator's verdict on it.
  std::string report(
      const Leased& trial, Outcome outcome, const std::vector<Forged>& events,
      const std::function<void(forktrial::schema::wire::Report::Builder)>& shape = {}) {
    capnp::MallocMessageBuilder message(1 << 16);
    auto report = wire::start(message, request_++).initReport();
    auto ref = report.initTrial();
    ref.setJob(trial.job);
    ref.setIndex(trial.index);
    ref.setAttempt(trial.attempt);
    report.setOutcome(static_cast<forktrial::schema::TrialOutcome>(std::to_underlying(outcome)));
    report.setForkSeq(31);
    auto list = report.initEvents(static_cast<unsigned>(events.size()));
    auto text = [](const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); };
    for (unsigned i = 0; i < events.size(); ++i) {
      const Forged& f = events[i];
      auto e = list[i];
      e.setId(text(f.id));
      e.setType(text(f.type));
      e.setPayload(text(f.payload));
      e.setTimestamp(text(f.timestamp));
      if (!f.actor.empty()) e.getActor().setActorName(text(f.actor));
      if (!f.caused_by.empty()) e.getCause().setCausedBy(text(f.caused_by));
    }
    if (shape) shape(report);
    send(message);
    return verdict_of(next(Envelope::REPORT_ACK));
  }

  // A heartbeat naming `running`.
  void heartbeat(const std::vector<Leased>& running) {
    capnp::MallocMessageBuilder message;
    auto list = wire::start(message, request_++)
                    .initHeartbeat()
                    .initRunning(static_cast<unsigned>(running.size()));
    for (unsigned i = 0; i < running.size(); ++i) {
      list[i].setJob(running[i].job);
      list[i].setIndex(running[i].index);
      list[i].setAttempt(running[i].attempt);
    }
    send(message);
  }

  // Says the attempt of `trial` failed, for `reason`; the verdict.
  std::string attempt_failed(const Leased& trial, const std::string& reason) {
    capnp::MallocMessageBuilder message;
    auto failed = wire::start(message, request_++).initAttemptFailed();
    auto ref = failed.initTrial();
    ref.setJob(trial.job);
    ref.setIndex(trial.index);
    ref.setAttempt(trial.attempt);
    failed.setReason(capnp::Text::Reader(reason.data(), reason.size()));
    send(message);
    return verdict_of(next(Envelope::REPORT_ACK));
  }

 private:
  std::uint64_t request_ = 1;
};

// A job of `trials` greeter trials forked from run_chat at evt_031, with
// the default write budget (100,000 events).
std::string greeter_job(Cluster& cluster, int trials) {
  return cluster.submit(cluster.outcome_batch(trials, 1));
}

// The results of `job`, by trial index.
std::map<std::uint32_t, json> results_by_index(Cluster& cluster, const std::string& job) {
  std::map<std::uint32_t, json> out;
  for (auto& r : cluster.results(job)) out[r["index"].get<std::uint32_t>()] = r;
  return out;
}

// Every run of the store reads back whole, as scripts read it: `run export`
// and `run events --json` of every run succeed.
void every_run_reads_back(Cluster& cluster) {
  auto listed = run_forktrial({"run", "ls", "--store", cluster.store, "--json", "--all"});
  REQUIRE(listed.exit_code == 0);
  for (const auto& run : json::parse(listed.out)) {
    const std::string id = run["id"];
    for (const char* command : {"export", "events"}) {
      std::vector<std::string> args{"run", command, id, "--store", cluster.store};
      if (std::string(command) == "events") args.push_back("--json");
      auto read = run_forktrial(args);
      INFO(id << " " << command << ": " << read.err);
      CHECK(read.exit_code == 0);
    }
  }
}

// Clients still read everything: status, workers and every job's results
// (of at least one job, unless `jobs_expected` is false).
void clients_still_read(Cluster& cluster, bool jobs_expected = true) {
  auto status = cluster.client({"status", "--json"});
  INFO(status.err);
  REQUIRE(status.exit_code == 0);
  const json jobs = json::parse(status.out);
  if (jobs_expected) REQUIRE_FALSE(jobs["jobs"].empty());
  for (const auto& job : jobs["jobs"]) {
    auto results = cluster.client({"results", job["job"].get<std::string>(), "--json"});
    INFO(results.err);
    CHECK(results.exit_code == 0);
  }
  auto workers = cluster.client({"workers", "--json"});
  INFO(workers.err);
  CHECK(workers.exit_code == 0);
  auto text = cluster.client({"status"});
  CHECK(text.exit_code == 0);
}

// A keypair `name` made in `keys`, and the path of an allow list of it alone.
std::string listed_key(Keys& keys, const std::string& name) {
  REQUIRE(run_forktrial({"keygen", keys.path(name + ".key")}).exit_code == 0);
  keys.dir.write(name + ".allow", forktrial::testing::read_file(keys.path(name + ".key.pub")));
  return keys.path(name + ".allow");
}

// The cluster's coordinator on a TCP port of loopback, with `keys` and
// `extra` options, its lease `lease` seconds.
void start_keyed(Cluster& cluster, const Keys& keys, const std::vector<std::string>& extra,
                 const std::string& lease = "30") {
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  cluster.start_coordinator(lease, with(keys.coordinator(), extra));
}

// `args` run against the cluster's coordinator as the keys' `who`.
forktrial::testing::CommandResult run_as(const Cluster& cluster, const Keys& keys,
                                         const std::string& who, std::vector<std::string> args) {
  args.insert(args.end(), {"--coordinator", cluster.endpoint, "--timeout", "30"});
  return run_forktrial(with(args, keys.as(who)));
}

// The reports a local parent would never record, each on its own trial, and
// the rule each breaks (as the verdict and the result name it).
struct Forgery {
  std::string what;
  std::vector<Forged> events;
  std::string rule;
  std::function<void(forktrial::schema::wire::Report::Builder)> shape = {};
};

std::vector<Forgery> forgeries() {
  const std::string zwsp = "\u200b", wj = "\u2060";
  auto one = [](Forged f) { return std::vector<Forged>{std::move(f)}; };
  return {
      {"the parent's wall-clock record",
       one({.id = "evt_f1",
            .type = "trial.wall_clock_exhausted",
            .payload = R"({"limit_seconds": 1})",
            .actor = "forktrial.parent"}),
       "poses as a parent record"},
      {"a behavior.failed by runtime naming no behavior",
       one({.id = "evt_f2", .type = "behavior.failed", .payload = "{}", .actor = "runtime"}),
       "behavior"},
      {"a behavior.failed by the candidate",
       one({.id = "evt_f3",
            .type = "behavior.failed",
            .payload = R"({"behavior": "x", "event_id": "evt_031"})",
            .actor = "candidate",
            .caused_by = "evt_031"}),
       "runtime"},
      {"a truncated payload", one({.id = "evt_f4", .payload = R"({"a": )"}), "payload"},
      {"a NaN payload", one({.id = "evt_f5", .payload = R"({"score": NaN})"}), "NaN"},
      {"a payload with a repeated key", one({.id = "evt_f6", .payload = R"({"a": 1, "a": 2})"}),
       "payload"},
      {"an array payload", one({.id = "evt_f7", .payload = "[1, 2]"}), "payload"},
      {"a payload that is not JSON", one({.id = "evt_f8", .payload = "hello"}), "payload"},
      {"a reserved type behind U+200B",
       one({.id = "evt_f9", .type = "trial" + zwsp + ".wall_clock_exhausted"}), "U+200B"},
      {"the runtime's actor behind U+2060", one({.id = "evt_fa", .actor = "runtime" + wj}),
       "U+2060"},
      {"an event stamped before the fork point",
       one({.id = "evt_fb", .timestamp = "2020-01-01T00:00:00Z"}), "never goes backwards"},
      {"an outcome forktrial does not have",
       {},
       "outcome 200",
       [](auto report) { report.setOutcome(static_cast<forktrial::schema::TrialOutcome>(200)); }},
      {"an isolation level forktrial does not have",
       {},
       "isolation 7",
       [](auto report) {
         report.setIsolation(static_cast<forktrial::schema::wire::IsolationLevel>(7));
       }},
      {"a wall-clock kill of a completed trial",
       {},
       "wall clock killed",
       [](auto report) { report.setWallClockKilled(true); }},
      {"a net forktrial does not have",
       {},
       "net 99",
       [](auto report) { report.setNet(static_cast<forktrial::schema::Net>(99)); }},
      {"a net that stopped a completed trial",
       {},
       "names the memory net, but its outcome is completed",
       [](auto report) { report.setNet(forktrial::schema::Net::MEMORY); }},
      {"an executor its trial does not run on",
       {},
       "it says activegraph ran the candidate, which needs the lua executor",
       [](auto report) { report.initExecutor().setName("activegraph"); }},
      {"a Lua version its worker's hello did not offer",
       {},
       "but its worker's hello offered",
       [](auto report) {
         auto executor = report.initExecutor();
         executor.setName("lua");
         executor.setVersion("9.9");
       }},
  };
}

// Every forgery fails its attempt, with the rule, and nothing of it is
// recorded; one honest report beside them is recorded.
void forgeries_fail_their_attempts(Cluster& cluster, const Keys* keys) {
  const auto all = forgeries();
  const std::string job = greeter_job(cluster, static_cast<int>(all.size()) + 1);
  RogueWorker worker(cluster.endpoint, "rogue", keys);
  auto leased = worker.lease(all.size() + 1);
  std::map<std::uint32_t, std::size_t> forgery_of;  // trial index -> forgery
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Forgery& f = all[i];
    INFO(f.what);
    const std::string verdict = worker.report(leased[i], Outcome::completed, f.events, f.shape);
    CHECK_THAT(verdict, Catch::StartsWith("refused: worker rogue's report breaks the rules") &&
                            Catch::Contains(f.rule));
    forgery_of[leased[i].index] = i;
  }
  const Leased& honest = leased.back();
  CHECK(worker.report(honest, Outcome::completed,
                      {{.id = "evt_h1", .type = "chat.note", .payload = R"({"text": "hi"})"}}) ==
        "accepted");

  auto results = results_by_index(cluster, job);
  REQUIRE(results.size() == all.size() + 1);
  for (const auto& [index, result] : results) {
    INFO(result.dump());
    if (index == honest.index) {
      CHECK(result["status"] == "reconciled");
      CHECK(result["events_appended"] == 1);
      continue;
    }
    // --max-attempts 1: the failed attempt abandons the trial, saying why.
    CHECK(result["status"] == "abandoned");
    CHECK(result["fork_run_id"].is_null());
    CHECK_THAT(result["detail"].get<std::string>(), Catch::Contains(all[forgery_of[index]].rule));
  }
  CHECK(cluster.forks().size() == 1);
  every_run_reads_back(cluster);
  clients_still_read(cluster);
}

}  // namespace

TEST_CASE("a compromised worker's forged records and payloads fail their attempts, unrecorded",
          "[cluster][rogue]") {
  Cluster cluster;
  cluster.start_coordinator("30", {"--max-attempts", "1"});
  forgeries_fail_their_attempts(cluster, nullptr);
}

TEST_CASE("a compromised worker with a listed key is held to the same rules",
          "[cluster][rogue][curve]") {
  Keys keys;
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  cluster.client_extra = keys.as("client");
  cluster.start_coordinator("30", with({"--max-attempts", "1"}, keys.coordinator()));
  forgeries_fail_their_attempts(cluster, &keys);
}

TEST_CASE("text that is not UTF-8 is repaired or refused at the wire, and every client reads on",
          "[cluster][rogue]") {
  Cluster cluster;
  cluster.start_coordinator("30", {"--max-attempts", "1"});
  const std::string bad = "bad \xff\xfe text \xc3";
  const std::string job = greeter_job(cluster, 3);
  // Hello warnings are prose: repaired.
  RogueWorker worker(cluster.endpoint, "rogue", nullptr, {bad, "fine"});
  auto leased = worker.lease(3);
  // A report's detail is prose: repaired, and the report is recorded.
  CHECK(worker.report(leased[0], Outcome::completed, {}, [&](auto report) {
    report.setDetail(capnp::Text::Reader(bad.data(), bad.size()));
    auto warnings = report.initWarnings(1);
    warnings.set(0, capnp::Text::Reader(bad.data(), bad.size()));
  }) == "accepted");
  // A failure reason is prose: repaired.
  CHECK(worker.attempt_failed(leased[1], bad) == "accepted");
  // An event's type is a name: held to the store's rule with the rest of
  // the delta, which fails the attempt.
  {
    Forged event{.id = "evt_u1", .type = bad};
    CHECK_THAT(worker.report(leased[2], Outcome::completed, {event}),
               Catch::StartsWith("refused: ") && Catch::Contains("UTF-8"));
  }
  // A trial's job is a name: the whole message is refused as malformed,
  // naming the field, and nothing of it is taken.
  {
    capnp::MallocMessageBuilder message;
    auto report = wire::start(message, 90).initReport();
    auto ref = report.initTrial();
    ref.setJob(capnp::Text::Reader(bad.data(), bad.size()));
    ref.setIndex(0);
    ref.setAttempt(1);
    const auto [code, text] = worker.refusal(wire::encode(message));
    CHECK(code == forktrial::schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK_THAT(text, Catch::Contains("field report.trial.job is not valid UTF-8 (byte 0xFF"));
  }
  // A job's name is a name: refused.
  {
    Peer client(cluster.endpoint, nullptr);
    capnp::MallocMessageBuilder hello;
    wire::start(hello, 1).setClientHello();
    client.send(hello);
    client.next(Envelope::OK);
    capnp::MallocMessageBuilder message;
    auto submit = wire::start(message, 2).initSubmitJob();
    submit.setName(capnp::Text::Reader(bad.data(), bad.size()));
    submit.initSpecs(0);
    const auto [code, text] = client.refusal(wire::encode(message));
    CHECK(code == forktrial::schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK_THAT(text, Catch::Contains("submitJob.name") && Catch::Contains("not valid UTF-8"));
  }
  auto results = results_by_index(cluster, job);
  const std::string repaired = "bad \ufffd\ufffd text \ufffd";
  CHECK_THAT(results[leased[0].index]["detail"].get<std::string>(), Catch::Contains(repaired));
  CHECK_THAT(results[leased[1].index]["detail"].get<std::string>(), Catch::Contains(repaired));
  auto workers = json::parse(cluster.client({"workers", "--json"}).out);
  REQUIRE(workers["workers"].size() == 1);
  CHECK(workers["workers"][0]["degraded_nets"] == json::array({repaired, "fine"}));
  every_run_reads_back(cluster);
  clients_still_read(cluster);
}

TEST_CASE("a report past the write budget or the verdict's bounds is not recorded whole",
          "[cluster][rogue][no-tsan]") {
  Cluster cluster;
  cluster.start_coordinator("60", {"--max-attempts", "1"});
  const std::string job = greeter_job(cluster, 2);
  RogueWorker worker(cluster.endpoint, "rogue");
  auto leased = worker.lease(2);
  // 150,000 events for a budget of 100,000 (and its closing record).
  std::vector<Forged> flood(150'000);
  for (std::size_t i = 0; i < flood.size(); ++i) flood[i].id = "evt_n" + std::to_string(i);
  CHECK_THAT(worker.report(leased[0], Outcome::completed, flood),
             Catch::StartsWith("refused: ") && Catch::Contains("write budget") &&
                 Catch::Contains("max_appended_events = 100000"));
  // A 100 MiB detail and 10,000 warnings: recorded within the bounds a
  // local verdict has.
  const std::string huge(std::size_t{100} << 20, 'd');
  CHECK(worker.report(leased[1], Outcome::completed, {}, [&](auto report) {
    report.setDetail(capnp::Text::Reader(huge.data(), huge.size()));
    auto warnings = report.initWarnings(10'000);
    for (unsigned i = 0; i < 10'000; ++i) warnings.set(i, "w");
  }) == "accepted");
  auto results = results_by_index(cluster, job);
  INFO(results[leased[0].index].dump());
  CHECK(results[leased[0].index]["status"] == "abandoned");
  const auto& big = results[leased[1].index];
  CHECK(big["status"] == "reconciled");
  CHECK(big["detail"].get<std::string>().size() <= (std::size_t{272} << 10) + 1024);
  CHECK(big["detail"].get<std::string>().size() >= (std::size_t{200} << 10));
  CHECK(big["warnings"].size() == 65);
  CHECK(cluster.forks().size() == 1);
  every_run_reads_back(cluster);
  clients_still_read(cluster);
}

TEST_CASE("a worker cannot claim the queue with slots, nor hold a trial with heartbeats",
          "[cluster][rogue]") {
  Cluster cluster;
  cluster.start_coordinator("1", {"--max-attempts", "1", "--max-worker-slots", "4"});
  // Trials with a wall clock of one second.
  std::string batch = cluster.read(cluster.outcome_batch(6, 1));
  const std::string twenty = "\"wall_clock_seconds\":20", one = "\"wall_clock_seconds\":1";
  for (std::size_t at = 0; (at = batch.find(twenty, at)) != std::string::npos;) {
    batch.replace(at, twenty.size(), one);
  }
  const std::string job = cluster.submit(cluster.dir.write("short.jsonl", batch).string());
  {
    // Four billion slots: refused at the hello, saying what to do.
    Peer greedy(cluster.endpoint, nullptr);
    capnp::MallocMessageBuilder hello;
    auto h = wire::start(hello, 1).initWorkerHello();
    h.setWorkerId("greedy");
    h.setSlots(4'000'000'000u);
    const auto [code, text] = greedy.refusal(wire::encode(hello));
    CHECK(code == forktrial::schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK_THAT(text, Catch::Contains("offers 4000000000 slots; this coordinator takes at most 4") &&
                         Catch::Contains("--max-worker-slots"));
  }
  // At the most slots it may have, a worker is leased no more than them.
  RogueWorker hoarder(cluster.endpoint, "hoarder", nullptr, {}, 4);
  const auto held = hoarder.lease(4);
  CHECK(held.size() == 4);
  // It heartbeats its leases and never runs them: they end at their
  // deadline (a second's wall clock and a lease either side), not later.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    hoarder.heartbeat(held);
    auto results = results_by_index(cluster, job);
    const auto abandoned = std::count_if(results.begin(), results.end(), [](const auto& r) {
      return r.second["status"] == "abandoned";
    });
    if (abandoned == 4) {
      for (const auto& lease : held) {
        CHECK_THAT(results[lease.index]["detail"].get<std::string>(),
                   Catch::Contains("worker hoarder held it to its deadline") &&
                       Catch::Contains("heartbeats do not extend an attempt past it"));
      }
      break;
    }
    REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  clients_still_read(cluster);
}

TEST_CASE("a goodbye ends its sender's leases alone, and a client's or a stranger's is refused",
          "[cluster][rogue]") {
  Cluster cluster;
  // No lease lapses in this test, and a failed attempt is the trial's last:
  // only a goodbye can end a lease here, and what it ends shows.
  cluster.start_coordinator("600", {"--max-attempts", "1"});
  const std::string job = greeter_job(cluster, 4);
  RogueWorker victim(cluster.endpoint, "victim");
  const auto kept = victim.lease(2);
  RogueWorker rogue(cluster.endpoint, "rogue");
  const auto dropped = rogue.lease(2);
  auto goodbye = [](std::uint64_t request, const std::string& reason) {
    capnp::MallocMessageBuilder message;
    wire::start(message, request)
        .initWorkerGoodbye()
        .setReason(capnp::Text::Reader(reason.data(), reason.size()));
    return wire::encode(message);
  };
  {
    Peer stranger(cluster.endpoint, nullptr);
    const auto [code, text] = stranger.refusal(goodbye(1, "stopped"));
    CHECK(code == forktrial::schema::wire::ErrorCode::FAILED_PRECONDITION);
    CHECK(text == "say hello first (workerHello or clientHello)");
  }
  {
    Peer client(cluster.endpoint, nullptr);
    capnp::MallocMessageBuilder hello;
    wire::start(hello, 1).setClientHello();
    client.send(hello);
    client.next(Envelope::OK);
    const auto [code, text] = client.refusal(goodbye(2, "stopped"));
    CHECK(code == forktrial::schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK(text == "a client may not send this message");
  }
  // The rogue's goodbye, its reason not UTF-8, with a terminal escape, and
  // far past its bound: repaired and cut, and it ends the rogue's leases
  // alone (a goodbye names no worker: it can only be its sender's).
  const std::string reason = "bad \xff\x1b[2J text " + std::string(10'000, 'x');
  rogue.send(goodbye(100, reason));
  CHECK(rogue.next(Envelope::OK).envelope().getRequestId() == 100);
  // Its connection is a stranger's now.
  capnp::MallocMessageBuilder beat;
  wire::start(beat, 101).initHeartbeat().initRunning(0);
  const auto [code, text] = rogue.refusal(wire::encode(beat));
  CHECK(code == forktrial::schema::wire::ErrorCode::FAILED_PRECONDITION);
  // The victim's leases hold: its reports are accepted, not fenced.
  for (std::size_t i = 0; i < kept.size(); ++i) {
    CHECK(victim.report(kept[i], Outcome::completed,
                        {{.id = "evt_v" + std::to_string(i),
                          .type = "chat.note",
                          .payload = R"({"text": "hi"})"}}) == "accepted");
  }
  auto workers = json::parse(cluster.client({"workers", "--json"}).out);
  std::map<std::string, bool> alive;
  for (const auto& w : workers["workers"]) alive[w["worker"]] = w["alive"];
  CHECK(alive == std::map<std::string, bool>{{"victim", true}, {"rogue", false}});
  auto results = results_by_index(cluster, job);
  REQUIRE(results.size() == 4);
  for (const auto& lease : kept) CHECK(results[lease.index]["status"] == "reconciled");
  for (const auto& lease : dropped) {
    const json& result = results[lease.index];
    INFO(result.dump());
    CHECK(result["status"] == "abandoned");
    const std::string detail = result["detail"].get<std::string>();
    CHECK_THAT(detail, Catch::Contains("worker rogue lost: it said goodbye: bad \ufffd"));
    CHECK(detail.find(std::string(4097, 'x')) == std::string::npos);
  }
  every_run_reads_back(cluster);
  clients_still_read(cluster);
}

TEST_CASE("with keys, a client acts on its own jobs only, and an administrator on every job",
          "[cluster][rogue][curve]") {
  Keys keys;
  for (const char* name : {"other.key", "admin.key"}) {
    REQUIRE(run_forktrial({"keygen", keys.path(name)}).exit_code == 0);
  }
  keys.dir.write("others.allow", forktrial::testing::read_file(keys.path("other.key.pub")));
  keys.dir.write("admins.allow", forktrial::testing::read_file(keys.path("admin.key.pub")));
  Cluster cluster;
  cluster.endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  cluster.start_coordinator(
      "30", with(keys.coordinator(), {"--allow-clients", keys.path("others.allow"),
                                      "--admin-clients", keys.path("admins.allow")}));
  const std::string batch = cluster.outcome_batch(1, 1);
  // `args` run as the client with keypair `who`.
  auto as = [&](const std::string& who, std::vector<std::string> args) {
    args.insert(args.end(), {"--coordinator", cluster.endpoint, "--timeout", "30"});
    return run_forktrial(with(args, keys.as(who)));
  };
  auto submitted_by = [&](const std::string& who) {
    auto submitted = as(who, {"submit", batch, "--json"});
    INFO(submitted.err);
    REQUIRE(submitted.exit_code == 0);
    return json::parse(submitted.out)["job"].get<std::string>();
  };
  auto jobs_seen_by = [&](const std::string& who) {
    auto status = as(who, {"status", "--json"});
    INFO(status.err);
    REQUIRE(status.exit_code == 0);
    std::set<std::string> jobs;
    const json doc = json::parse(status.out);
    for (const auto& job : doc["jobs"]) jobs.insert(job["job"].get<std::string>());
    return jobs;
  };
  const std::string alices = submitted_by("client");
  const std::string bobs = submitted_by("other");
  std::string alice_key = forktrial::testing::read_file(keys.path("client.key.pub"));
  alice_key = alice_key.substr(alice_key.find('"') + 1, 40);

  // Bob can neither read nor cancel Alice's job, and is told why.
  for (const char* verb : {"status", "results", "cancel"}) {
    INFO(verb);
    auto refused = as("other", {verb, alices});
    CHECK(refused.exit_code != 0);
    CHECK_THAT(refused.err, Catch::Contains("only the key that submitted a job") &&
                                Catch::Contains("--admin-clients"));
  }
  CHECK(jobs_seen_by("other") == std::set<std::string>{bobs});
  CHECK(jobs_seen_by("client") == std::set<std::string>{alices});
  // Alice's job is untouched, and says whose it is.
  auto own = as("client", {"status", alices, "--json"});
  REQUIRE(own.exit_code == 0);
  CHECK(json::parse(own.out)["cancelled"] == false);
  CHECK(json::parse(own.out)["owner"] == alice_key);
  // An administrator sees and acts on both.
  CHECK(jobs_seen_by("admin") == std::set<std::string>{alices, bobs});
  CHECK(as("admin", {"results", alices, "--json"}).exit_code == 0);
  CHECK(as("admin", {"cancel", bobs}).exit_code == 0);
  // The owner cancels its own.
  CHECK(as("client", {"cancel", alices}).exit_code == 0);
  CHECK(cluster.log_text().find("refused to cancel job " + alices) != std::string::npos);
}

TEST_CASE(
    "a client forks its own runs and the store's, never another client's or the coordinator's",
    "[cluster][rogue][curve]") {
  Keys keys;
  Cluster cluster;
  start_keyed(cluster, keys, {"--allow-clients", listed_key(keys, "other")});
  cluster.start_worker(1, 1, {}, keys.as("worker"));
  auto as = [&](const std::string& who, std::vector<std::string> args) {
    return run_as(cluster, keys, who, std::move(args));
  };
  const std::string chat = kExamples + "/runs/chat.jsonl";
  const std::string whatif = kExamples + "/runs/chat-whatif.jsonl";
  // A batch of one greeter trial forked from `parent`.
  auto batch_from = [&](const std::string& parent) { return cluster.outcome_batch(1, 1, parent); };
  auto submitted = [&](const std::string& who, const std::string& parent) {
    auto result = as(who, {"submit", batch_from(parent), "--json"});
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return json::parse(result.out)["job"].get<std::string>();
  };
  auto refused_to = [&](const std::string& who, const std::string& parent) {
    auto result = as(who, {"submit", batch_from(parent)});
    CHECK(result.exit_code != 0);
    return result.err;
  };

  // Alice imports a run; sent again, the same import is the same run.
  REQUIRE(as("client", {"import", chat, "--id", "run_alice"}).exit_code == 0);
  CHECK(as("client", {"import", chat, "--id", "run_alice"}).exit_code == 0);
  // Bob cannot take her id, with his own file or with hers (a resend is the
  // same client's, with the same file).
  for (const auto& file : {whatif, chat}) {
    auto squatted = as("other", {"import", file, "--id", "run_alice"});
    CHECK(squatted.exit_code != 0);
    CHECK_THAT(squatted.err, Catch::Contains("has a run run_alice already") &&
                                 Catch::Contains("give the run another id"));
  }
  // Alice herself cannot put another file under it.
  CHECK(as("client", {"import", whatif, "--id", "run_alice"}).exit_code != 0);
  // Bob can neither fork her run in a job nor import a fork of it: to him
  // it is a run the coordinator does not have.
  CHECK_THAT(refused_to("other", "run_alice"),
             Catch::Contains("no run run_alice in the coordinator's store"));
  auto fork = as("other", {"import", whatif, "--id", "run_bobs_fork", "--fork-of", "run_alice",
                           "--at", "evt_009"});
  CHECK(fork.exit_code != 0);
  CHECK_THAT(fork.err, Catch::Contains("no run run_alice in the coordinator's store"));
  // Alice forks her run, and both fork the run of the store's operators.
  auto completed = [&](const std::string& who, const std::string& job) {
    auto waited = as(who, {"wait", job, "--json", "--max-wait", "60"});
    INFO(waited.err << cluster.log_text());
    const auto lines = forktrial::testing::lines_of(waited.out);
    REQUIRE_FALSE(lines.empty());
    return json::parse(lines.back())["completed"] == 1;
  };
  const std::string alices = submitted("client", "run_alice");
  CHECK(completed("client", alices));
  const std::string bobs = submitted("other", "run_chat");
  CHECK(completed("other", bobs));
  CHECK(as("client", {"import", whatif, "--id", "run_alice_fork", "--fork-of", "run_alice", "--at",
                      "evt_009"})
            .exit_code == 0);

  // The coordinator's own runs are no one's to fork, on any path: its log
  // (every job's names, keys and pins), a finished job's archive, and a
  // trial's fork, Bob's own included.
  const std::string own_fork = "run_" + bobs + "_0_a1";
  for (const std::string& run :
       {std::string("forktrial.orchestration"), "forktrial.archive." + alices, own_fork}) {
    INFO(run);
    CHECK_THAT(refused_to("other", run),
               Catch::Contains("run " + run + " is the coordinator's own") &&
                   Catch::Contains("import it as a run of your own"));
    auto forked = as(
        "other", {"import", whatif, "--id", "run_of_theirs", "--fork-of", run, "--at", "evt_001"});
    CHECK(forked.exit_code != 0);
    CHECK_THAT(forked.err, Catch::Contains("is the coordinator's own"));
  }
  // What Bob did not submit is not there for him: only his job's results.
  auto status = as("other", {"status", "--json"});
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["jobs"].size() == 1);
}

TEST_CASE("a rogue worker's forged result answers no other client from the cache, and is named",
          "[cluster][rogue][curve][cache]") {
  Keys keys;
  Cluster cluster;
  start_keyed(cluster, keys, {"--allow-clients", listed_key(keys, "other")});
  auto as = [&](const std::string& who, std::vector<std::string> args) {
    return run_as(cluster, keys, who, std::move(args));
  };
  // One trial of the greeter, a deterministic candidate, at evt_031.
  const std::string batch = cluster.outcome_batch(1, 1);
  auto submitted = [&](const std::string& who) {
    auto result = as(who, {"submit", batch, "--json"});
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return json::parse(result.out)["job"].get<std::string>();
  };
  auto results_of = [&](const std::string& who, const std::string& job) {
    auto waited = as(who, {"wait", job, "--json", "--max-wait", "60"});
    INFO(waited.err << cluster.log_text());
    REQUIRE_FALSE(forktrial::testing::lines_of(waited.out).empty());
    auto listed = as(who, {"results", job, "--json"});
    REQUIRE(listed.exit_code == 0);
    const auto lines = forktrial::testing::lines_of(listed.out);
    REQUIRE(lines.size() == 1);
    return json::parse(lines[0]);
  };

  // Alice's trial goes to a compromised worker, which makes up a result
  // that keeps every rule: it is recorded, and becomes her entry.
  const std::string alices = submitted("client");
  {
    RogueWorker rogue(cluster.endpoint, "rogue", &keys);
    const auto leased = rogue.lease(1);
    CHECK(rogue.report(leased[0], Outcome::completed,
                       {{.id = "evt_032",
                         .type = "chat.note",
                         .payload = R"({"text": "FORGED-BY-ROGUE"})"}}) == "accepted");
  }
  CHECK(results_of("client", alices)["worker"] == "rogue");

  // Bob's same trial is not answered from Alice's entry: an honest worker
  // runs it.
  cluster.start_worker(1, 1, {}, keys.as("worker"));
  const std::string bobs = submitted("other");
  const json bob = results_of("other", bobs);
  CHECK(bob["outcome"] == "completed");
  CHECK(bob["cached_from"].is_null());
  CHECK(bob["worker"] == "w1");
  auto events = run_forktrial(
      {"run", "events", bob["fork_run_id"].get<std::string>(), "--store", cluster.store, "--json"});
  REQUIRE(events.exit_code == 0);
  CHECK_FALSE(contains(events.out, "FORGED-BY-ROGUE"));

  // Alice's own resubmission is answered from her entry, and says whose
  // word it is.
  const json again = results_of("client", submitted("client"));
  CHECK(again["cached_from"] == alices + "#0");
  CHECK(again["cached_worker"] == "rogue");
}

TEST_CASE("a worker key that says hello again and again is quarantined before any trial is lost",
          "[cluster][rogue][curve]") {
  Keys keys;
  Cluster cluster;
  start_keyed(cluster, keys, {"--allow-workers", listed_key(keys, "honest")});
  cluster.client_extra = keys.as("client");
  const std::string job = greeter_job(cluster, 8);
  // The rogue joins, is leased four trials, and says hello again from a new
  // connection under the same key: its leases end, each trial spends an
  // attempt. The second time, it is quarantined and told so.
  {
    RogueWorker first(cluster.endpoint, "rogue", &keys, {}, 4);
    CHECK(first.lease(4).size() == 4);
    RogueWorker second(cluster.endpoint, "rogue", &keys, {}, 4);
    CHECK(second.lease(4).size() == 4);
    // The hello that quarantines it ends its second incarnation's leases
    // too: each trial has lost at most two attempts to it.
    Peer third(cluster.endpoint, &keys);
    capnp::MallocMessageBuilder hello;
    auto h = wire::start(hello, 1).initWorkerHello();
    h.setWorkerId("rogue");
    h.setSlots(4);
    const auto [code, text] = third.refusal(wire::encode(hello));
    CHECK(code == forktrial::schema::wire::ErrorCode::FAILED_PRECONDITION);
    CHECK_THAT(text, Catch::Contains("this worker is quarantined (key ") &&
                         Catch::Contains("its hellos ended its live leases 2 times within 10 "
                                         "minutes"));
    // Under another id, the same key is refused all the same.
    Peer fourth(cluster.endpoint, &keys);
    capnp::MallocMessageBuilder renamed;
    auto r = wire::start(renamed, 1).initWorkerHello();
    r.setWorkerId("innocent");
    r.setSlots(4);
    CHECK_THAT(fourth.refusal(wire::encode(renamed)).second, Catch::Contains("quarantined"));
  }
  CHECK(contains(cluster.log_text(), "quarantined worker rogue (key "));
  auto workers = json::parse(cluster.client({"workers", "--json"}).out);
  bool named = false;
  for (const auto& w : workers["workers"]) {
    if (w["worker"] == "rogue") named = w.contains("quarantined");
  }
  CHECK(named);
  // An honest worker runs the job: no trial was abandoned (each lost at
  // most two attempts to the rogue; the cap is 3).
  cluster.start_worker(1, 2, {}, keys.as("honest"));
  const json summary = cluster.wait(job);
  CHECK(summary["completed"] == 8);
  CHECK(summary["abandoned"] == 0);
}

TEST_CASE("abandoned partial uploads spill to disk within a client's share and an overall limit",
          "[cluster][rogue]") {
  Cluster cluster;
  cluster.start_coordinator();
  const std::string chunk(std::size_t{1} << 20, 'u');
  // Starts an upload of a declared 1 GiB blob with its first 1 MiB; the
  // coordinator's answer (an error's code and message, or ok).
  auto start_upload =
      [&](Peer& peer,
          int n) -> std::pair<std::optional<forktrial::schema::wire::ErrorCode>, std::string> {
    capnp::MallocMessageBuilder message(1 << 17);
    auto put = wire::start(message, 100 + n).initPutBlob();
    wire::set_digest(put.initDigest(), forktrial::Sha256::of("blob " + std::to_string(n)));
    put.setTotalSize(std::uint64_t{1} << 30);
    put.setOffset(0);
    put.setBytes(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(chunk.data()), chunk.size()));
    peer.send(wire::encode(message));
    auto decoded = peer.next_any();
    if (decoded.envelope().which() == Envelope::ERROR) {
      return {decoded.envelope().getError().getCode(),
              wire::text(decoded.envelope().getError().getMessage())};
    }
    return {std::nullopt, ""};
  };
  auto hello = [&](Peer& peer) {
    capnp::MallocMessageBuilder message;
    wire::start(message, 1).setClientHello();
    peer.send(message);
    peer.next(Envelope::OK);
  };
  // One connection: two blobs of 1 GiB are its share.
  Peer one(cluster.endpoint, nullptr);
  hello(one);
  CHECK_FALSE(start_upload(one, 0).first);
  CHECK_FALSE(start_upload(one, 1).first);
  const auto third = start_upload(one, 2);
  CHECK(third.first == forktrial::schema::wire::ErrorCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(third.second, Catch::StartsWith("this client has 2 uploads in progress"));
  // Many connections: together no more than 8 GiB in progress.
  std::vector<std::unique_ptr<Peer>> many;
  int accepted = 2;
  std::optional<std::pair<std::optional<forktrial::schema::wire::ErrorCode>, std::string>> refused;
  for (int n = 0; n < 8 && !refused; ++n) {
    many.push_back(std::make_unique<Peer>(cluster.endpoint, nullptr));
    hello(*many.back());
    auto answer = start_upload(*many.back(), 10 + n);
    if (answer.first) {
      refused = answer;
    } else {
      ++accepted;
    }
  }
  CHECK(accepted == 8);
  REQUIRE(refused);
  CHECK(refused->first == forktrial::schema::wire::ErrorCode::UNAVAILABLE);
  CHECK_THAT(refused->second, Catch::Contains("of uploads in progress, its limit"));
  // What was accepted waits on disk, one file an upload, not in memory.
  std::size_t spooled = 0;
  for (const auto& file : std::filesystem::directory_iterator(cluster.store + "/uploads")) {
    CHECK(file.file_size() == chunk.size());
    ++spooled;
  }
  CHECK(spooled == 8);
  clients_still_read(cluster, false);
}

TEST_CASE("a job too large for one message goes in parts, and becomes one job with its last",
          "[cluster][rogue]") {
  Cluster cluster;
  cluster.start_coordinator();
  // Uploaded and pinned by a real submit first: the bundle is in the store.
  cluster.submit(cluster.outcome_batch(1, 1));
  auto archive = forktrial::pack::archive_pack(kExamples + "/packs/greeter");
  REQUIRE(archive);
  const auto digest = forktrial::Sha256::of(archive->bytes);
  std::vector<std::string> trials;
  for (int i = 0; i < 50; ++i) {
    trials.push_back(bundle_trial("greeter", digest, archive->bundle_hash.str()));
  }
  forktrial::coordinator::Client client(cluster.endpoint, std::chrono::seconds(10));
  // Parts of at most 4 KiB: a few specs each, a dozen parts or more.
  const auto submitted = client.submit("in parts", 0, trials, {}, 4096);
  CHECK(submitted.total == 50);
  auto status = cluster.client({"status", submitted.job, "--json"});
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["total"] == 50);
  CHECK(cluster.results(submitted.job).size() == 50);
  CHECK(cluster.log_text().find("job " + submitted.job + " submitted with 50 trials") !=
        std::string::npos);

  // By hand: a part before part 0, a part of another name, a part sent twice.
  Peer peer(cluster.endpoint, nullptr);
  {
    capnp::MallocMessageBuilder hello;
    wire::start(hello, 1).setClientHello();
    peer.send(hello);
    peer.next(Envelope::OK);
  }
  auto part = [&](std::uint32_t n, std::uint32_t parts, const std::string& name) {
    capnp::MallocMessageBuilder message;
    auto job = wire::start(message, 10 + n).initSubmitJob();
    job.setName(name);
    job.setToken("00000000000000aa");
    job.setPart(n);
    job.setParts(parts);
    job.initSpecs(1).set(0, trials[0]);
    return wire::encode(message);
  };
  auto [early, early_text] = peer.refusal(part(1, 3, "x"));
  CHECK(early == forktrial::schema::wire::ErrorCode::FAILED_PRECONDITION);
  CHECK_THAT(early_text, Catch::Contains("came before its part 0"));
  peer.send(part(0, 3, "x"));
  peer.next(Envelope::OK);
  peer.send(part(0, 3, "x"));  // sent again: taken once
  peer.next(Envelope::OK);
  auto [other, other_text] = peer.refusal(part(1, 3, "y"));
  CHECK(other == forktrial::schema::wire::ErrorCode::CONFLICT);
  CHECK_THAT(other_text, Catch::Contains("does not belong to job job_00000000000000aa"));
  peer.send(part(1, 3, "x"));
  peer.next(Envelope::OK);
  peer.send(part(2, 3, "x"));
  auto accepted = peer.next(Envelope::JOB_ACCEPTED);
  CHECK(accepted.envelope().getJobAccepted().getTotal() == 3);
  // The last part sent again is answered with the job.
  peer.send(part(2, 3, "x"));
  CHECK(peer.next(Envelope::JOB_ACCEPTED).envelope().getJobAccepted().getTotal() == 3);
}

TEST_CASE("a trial larger than one message is refused before anything is sent, saying why",
          "[cluster][rogue][no-tsan]") {
  Cluster cluster;
  cluster.start_coordinator();
  forktrial::coordinator::Client client(cluster.endpoint, std::chrono::seconds(10));
  const std::vector<std::string> trials{"{}", std::string(std::size_t{300} << 20, ' ')};
  try {
    client.submit("huge", 0, trials, {});
    FAIL("a specification past the frame limit was sent");
  } catch (const forktrial::Error& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("trial 1's specification is 300 MiB, more than one message to the "
                               "coordinator may hold (256 MiB); nothing was submitted"));
  }
  // Nothing reached the coordinator, which serves on.
  auto status = cluster.client({"status", "--json"});
  REQUIRE(status.exit_code == 0);
  CHECK(json::parse(status.out)["jobs"].empty());
}

namespace {

// The resident and peak memory of the process whose command line names
// `marker` (kB each), or {0, 0}.
std::pair<long, long> memory_of_process_naming(const std::string& marker) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string text((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (text.find(marker) == std::string::npos || text.find("coordinator") == std::string::npos)
      continue;
    std::ifstream status(entry.path() / "status");
    long rss = 0, peak = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("VmRSS:")) rss = std::stol(line.substr(6));
      if (line.starts_with("VmHWM:")) peak = std::stol(line.substr(6));
    }
    return {rss, peak};
  }
  return {0, 0};
}

}  // namespace

// Its peak is bytes: under ThreadSanitizer the shadow memory multiplies it,
// and what its threads share is what every other cluster test's share.
TEST_CASE("a client's oversized texts are refused without the coordinator keeping their bytes",
          "[cluster][rogue][no-tsan]") {
  Cluster cluster;
  cluster.start_coordinator("3", {"--max-client-bytes", "1M", "--max-queued-bytes", "2M"});
  cluster.submit(cluster.outcome_batch(1, 1));  // the greeter's bundle is in the store
  auto archive = forktrial::pack::archive_pack(kExamples + "/packs/greeter");
  REQUIRE(archive);
  const auto digest = forktrial::Sha256::of(archive->bytes);
  json trial = json::parse(bundle_trial("greeter", digest, archive->bundle_hash.str()));
  trial["spec"]["label"] = std::string(std::size_t{64} << 20, 'l');
  const std::string big = trial.dump();
  forktrial::coordinator::Client client(cluster.endpoint, std::chrono::seconds(60));
  for (int i = 0; i < 3; ++i) {
    try {
      client.submit("big label " + std::to_string(i), 0, {big}, {});
      FAIL("a 64 MiB label was accepted");
    } catch (const forktrial::Error& e) {
      CHECK(e.code() == forktrial::ErrorCode::resource_exhausted);
      CHECK_THAT(e.what(),
                 Catch::Contains("this job's 671") && Catch::Contains("(--max-client-bytes)"));
    }
  }
  const auto [rss, peak] = memory_of_process_naming(cluster.store);
  INFO("coordinator rss " << rss << " kB, peak " << peak << " kB");
  CHECK(rss > 0);
  CHECK(rss < 200 * 1024);  // 805 MB once; the frame itself is the peak
  CHECK(peak < 400 * 1024);

  // One trial's text past 64 KiB is refused before it is parsed.
  trial["spec"]["label"] = std::string(100'000, 'l');
  try {
    client.submit("large label", 0, {trial.dump()}, {});
    FAIL("a 100,000-byte label was accepted");
  } catch (const forktrial::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("a trial's text is") &&
                             Catch::Contains("bytes; at most 65536 are taken"));
  }
  // What a batch file's reader refuses, the coordinator refuses too: a
  // label longer than a run's.
  trial["spec"]["label"] = std::string(2000, 'l');
  try {
    client.submit("long label", 0, {trial.dump()}, {});
    FAIL("a 2000-byte label was accepted");
  } catch (const forktrial::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("is 2000 bytes long; the limit is 1024"));
  }
  // Trials counted in bytes: many small ones pass the client's 1 MiB.
  std::vector<std::string> many;
  for (int i = 0; i < 4000; ++i) {  // about 350 bytes each
    trial["spec"]["label"] = "trial " + std::to_string(i);
    many.push_back(trial.dump());
  }
  try {
    client.submit("many", 0, many, {});
    FAIL("a job past --max-client-bytes was accepted");
  } catch (const forktrial::Error& e) {
    CHECK(e.code() == forktrial::ErrorCode::resource_exhausted);
    CHECK_THAT(e.what(),
               Catch::Contains("bytes of trial text") &&
                   Catch::Contains("would pass the limit of 1048576 (--max-client-bytes)"));
  }
  // A job within it is taken.
  many.resize(20);
  CHECK(client.submit("fewer", 0, many, {}).total == 20);
  clients_still_read(cluster);
}
