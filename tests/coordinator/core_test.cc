// CoordinatorCore: the coordinator's handling of frames without its socket,
// as the fuzz target drives it (fuzz/coordinator_fuzz.cc).
#include <capnp/message.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>

#include "coordinator/candidate_ranking.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/retention.h"
#include "coordinator/server.h"
#include "import/jsonl.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "tests/support/temp_dir.h"

using namespace forktrial;
using namespace forktrial::coordinator;
using forktrial::testing::TempDir;
using schema::wire::Envelope;

namespace {

const Log quiet = [](LogLevel, const std::string&) {};
const Instant kNow{std::chrono::milliseconds(1'700'000'000'000)};

std::string client_hello(std::uint64_t request) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).setClientHello();
  return wire::encode(message);
}

std::string status_request(std::uint64_t request, const std::string& job,
                           std::uint32_t hold_millis = 0) {
  capnp::MallocMessageBuilder message;
  auto query = wire::start(message, request).initStatusRequest();
  query.setJob(job);
  query.setHoldMillis(hold_millis);
  return wire::encode(message);
}

std::string cancel_request(std::uint64_t request, const std::string& job) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).initCancelJob().setJob(job);
  return wire::encode(message);
}

}  // namespace

TEST_CASE("the coordinator core answers each frame to its sender", "[coordinator][core]") {
  TempDir dir;
  ServerConfig config;
  config.store = dir.path() / "store";
  CoordinatorCore core(config, quiet);

  auto before_hello = core.turn("peer-a", status_request(7, ""), kNow);
  REQUIRE(before_hello.size() == 1);
  CHECK(before_hello[0].first == "peer-a");
  auto refused = wire::decode(before_hello[0].second);
  REQUIRE(refused.has_value());
  REQUIRE(refused->envelope().isError());
  CHECK(refused->envelope().getRequestId() == 7);
  CHECK(refused->envelope().getError().getCode() == schema::wire::ErrorCode::FAILED_PRECONDITION);

  auto hello = core.turn("peer-a", client_hello(8), kNow);
  REQUIRE(hello.size() == 1);
  auto ok = wire::decode(hello[0].second);
  REQUIRE(ok.has_value());
  CHECK(ok->envelope().which() == Envelope::OK);
  CHECK(ok->envelope().getRequestId() == 8);

  auto unknown_job = core.turn("peer-a", status_request(9, "job_nothing"), kNow);
  REQUIRE(unknown_job.size() == 1);
  auto not_found = wire::decode(unknown_job[0].second);
  REQUIRE(not_found.has_value());
  REQUIRE(not_found->envelope().isError());
  CHECK(not_found->envelope().getError().getCode() == schema::wire::ErrorCode::NOT_FOUND);
}

TEST_CASE("the coordinator core refuses bytes that are not a message as malformed",
          "[coordinator][core]") {
  TempDir dir;
  ServerConfig config;
  config.store = dir.path() / "store";
  CoordinatorCore core(config, quiet);
  auto replies = core.turn("peer-b", "not eight", kNow);
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].first == "peer-b");
  auto error = wire::decode(replies[0].second);
  REQUIRE(error.has_value());
  REQUIRE(error->envelope().isError());
  CHECK(error->envelope().getError().getCode() == schema::wire::ErrorCode::INVALID_ARGUMENT);
}

namespace {

// A store holding run_chat and the archive of examples/packs/greeter, and a
// submitted trial of that pack forked at evt_031.
struct GreeterStore {
  TempDir dir;
  std::filesystem::path store = dir.path() / "store";
  std::string trial;
  GreeterStore() {
    const std::filesystem::path source(FORKTRIAL_SOURCE_DIR);
    store::EventStore events(store);
    std::ifstream history(source / "examples/runs/chat.jsonl");
    auto parsed = import::jsonl::parse_events(history);
    REQUIRE(parsed);
    REQUIRE(events.import_run({.id = store::RunId("run_chat"), .label = "chat"}, *parsed));
    auto archive = pack::archive_pack(source / "examples/packs/greeter");
    REQUIRE(archive);
    events.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
    trial = R"({"candidate":"greeter","spec":{"at_event":"evt_031","candidate":{"root_dir":")" +
            wire::bundle_root(Sha256::of(archive->bytes)) + R"(","expected_bundle_hash":")" +
            archive->bundle_hash.str() +
            R"("},"extra_packs":[],"label":"t","limits":{},"parent_run_id":"run_chat",)"
            R"("scenario":"","schema_version":1}})";
  }
};

std::string part_frame(std::uint64_t request, std::uint32_t part, std::uint32_t parts,
                       const std::string& trial, unsigned trials) {
  capnp::MallocMessageBuilder message;
  auto job = wire::start(message, request).initSubmitJob();
  job.setName("parts");
  job.setToken("00000000000000b1");
  job.setPart(part);
  job.setParts(parts);
  auto specs = job.initSpecs(trials);
  for (unsigned i = 0; i < trials; ++i) specs.set(i, trial);
  return wire::encode(message);
}

// The one reply of a turn, decoded.
wire::Frame only_reply(const std::vector<std::pair<std::string, std::string>>& replies) {
  REQUIRE(replies.size() == 1);
  auto decoded = wire::decode(replies[0].second);
  REQUIRE(decoded.has_value());
  return std::move(*decoded);
}

}  // namespace

TEST_CASE("a job in parts is dropped when its parts stop coming, and a large one is recorded whole",
          "[coordinator][core]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  config.job_chunk_bytes = 1000;  // about a trial of this size to an event of the job
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    CHECK(
        only_reply(core.turn("c", part_frame(2, 0, 3, greeter.trial, 1), kNow)).envelope().isOk());
    // 61 s later (a status asked meanwhile lets time pass): dropped.
    only_reply(core.turn("c", status_request(3, ""), kNow + std::chrono::seconds(61)));
    auto late = only_reply(
        core.turn("c", part_frame(4, 1, 3, greeter.trial, 1), kNow + std::chrono::seconds(62)));
    REQUIRE(late.envelope().isError());
    CHECK(late.envelope().getError().getCode() == schema::wire::ErrorCode::FAILED_PRECONDITION);
    CHECK_THAT(
        wire::text(late.envelope().getError().getMessage()),
        Catch::Contains("idle for 60 s") && Catch::Contains("send the job again from part 0"));
    auto status =
        only_reply(core.turn("c", status_request(5, ""), kNow + std::chrono::seconds(62)));
    CHECK(nlohmann::json::parse(wire::text(status.envelope().getJobStatus().getText()))["jobs"] ==
          nlohmann::json::array());
    // Sent again from part 0, it makes a job of several events in the log.
    const Instant again = kNow + std::chrono::seconds(70);
    CHECK(
        only_reply(core.turn("c", part_frame(6, 0, 3, greeter.trial, 2), again)).envelope().isOk());
    CHECK(
        only_reply(core.turn("c", part_frame(7, 1, 3, greeter.trial, 2), again)).envelope().isOk());
    auto accepted = only_reply(core.turn("c", part_frame(8, 2, 3, greeter.trial, 3), again));
    REQUIRE(accepted.envelope().isJobAccepted());
    CHECK(accepted.envelope().getJobAccepted().getTotal() == 7);
  }
  std::size_t parts = 0;
  {
    store::EventStore store(config.store);
    const auto snapshot = store.snapshot();
    snapshot.for_each_event(*snapshot.run(kOrchestrationRun), 1, [&](const store::EventView& e) {
      parts += e.type == kJobTrialsType ? 1 : 0;
      return true;
    });
  }
  CHECK(parts >= 3);
  // A restarted coordinator reads the job back whole.
  CoordinatorCore restarted(config, quiet);
  only_reply(restarted.turn("c", client_hello(9), kNow + std::chrono::seconds(80)));
  auto status = only_reply(restarted.turn("c", status_request(10, "job_00000000000000b1"),
                                          kNow + std::chrono::seconds(80)));
  REQUIRE(status.envelope().isJobStatus());
  CHECK_THAT(wire::text(status.envelope().getJobStatus().getText()),
             Catch::Contains(R"("total":7)"));
}

namespace {

// A submission of `trials` copies of `trial`, without a token: the
// coordinator draws the job's id.
std::string untokened_submission(std::uint64_t request, const std::string& trial, unsigned trials) {
  capnp::MallocMessageBuilder message;
  auto job = wire::start(message, request).initSubmitJob();
  job.setName("drawn");
  auto specs = job.initSpecs(trials);
  for (unsigned i = 0; i < trials; ++i) specs.set(i, trial);
  return wire::encode(message);
}

// Every reply of a short session with a core of `seed` on a store like
// `greeter`'s: a hello, a job without a token, its status a minute later.
std::vector<std::pair<std::string, std::string>> session(std::uint64_t seed) {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  CoordinatorCore core(config, quiet, seed);
  std::vector<std::pair<std::string, std::string>> replies;
  for (auto [frame, at] : {std::pair{client_hello(1), kNow},
                           std::pair{untokened_submission(2, greeter.trial, 3), kNow},
                           std::pair{status_request(3, ""), kNow + std::chrono::minutes(1)}}) {
    for (auto& reply : core.turn("c", frame, at)) replies.push_back(std::move(reply));
  }
  return replies;
}

}  // namespace

TEST_CASE("the core is its seed's: the same frames give the same replies, byte for byte",
          "[coordinator][core]") {
  const auto first = session(42);
  REQUIRE(first.size() == 3);
  auto accepted = wire::decode(first[1].second);
  REQUIRE(accepted.has_value());
  REQUIRE(accepted->envelope().isJobAccepted());
  const std::string job = wire::text(accepted->envelope().getJobAccepted().getJob());
  CHECK_THAT(job, Catch::Matches("job_[0-9a-f]{16}"));
  // The job's id is drawn from the core's world, and its status is read at
  // the core's time: a second run is the same to the byte.
  CHECK(session(42) == first);
  const auto other = session(43);
  REQUIRE(other.size() == 3);
  CHECK(other[1].second != first[1].second);
}

namespace {

// A core on a GreeterStore, which client "c" said hello to.
struct GreeterCore {
  GreeterStore greeter;
  ServerConfig config = [this] {
    ServerConfig c;
    c.store = greeter.store;
    return c;
  }();
  CoordinatorCore core{config, quiet};
  GreeterCore() { only_reply(core.turn("c", client_hello(1), kNow)); }
};

}  // namespace

TEST_CASE("the core pauses when its world's disk fills and resumes when there is room again",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  const auto code_of = [](const wire::Frame& frame) {
    REQUIRE(frame.envelope().isError());
    return frame.envelope().getError().getCode();
  };

  // The disk fills: the submission's commit fails, so its answer is busy
  // and nothing of it is recorded.
  core.world().set_free_bytes(greeter.store, 0);
  CHECK(code_of(only_reply(core.turn("c", untokened_submission(2, greeter.trial, 2), kNow))) ==
        schema::wire::ErrorCode::UNAVAILABLE);
  auto status = only_reply(core.turn("c", status_request(3, ""), kNow + std::chrono::seconds(1)));
  CHECK_THAT(wire::text(status.envelope().getJobStatus().getText()),
             Catch::Contains(R"("jobs":[])") && Catch::Contains(R"("store_full")") &&
                 Catch::Contains("the world's disk is full"));
  // Still full at the next probes: still paused.
  CHECK(code_of(only_reply(core.turn("c", untokened_submission(4, greeter.trial, 2),
                                     kNow + std::chrono::seconds(5)))) ==
        schema::wire::ErrorCode::UNAVAILABLE);

  // Room again: the next probe resumes, and the submission goes through.
  core.world().set_free_bytes(greeter.store, std::uint64_t{1} << 30);
  only_reply(core.turn("c", status_request(5, ""), kNow + std::chrono::seconds(70)));
  auto accepted = only_reply(
      core.turn("c", untokened_submission(6, greeter.trial, 2), kNow + std::chrono::seconds(71)));
  REQUIRE(accepted.envelope().isJobAccepted());
  CHECK(accepted.envelope().getJobAccepted().getTotal() == 2);
  status = only_reply(core.turn("c", status_request(7, ""), kNow + std::chrono::seconds(72)));
  CHECK_THAT(wire::text(status.envelope().getJobStatus().getText()),
             !Catch::Contains("store_full") && Catch::Contains(R"("total":2)"));
}

TEST_CASE("the status warns while the store's disk is nearly full, before it fills",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  const auto status_at = [&](std::uint64_t request, const std::string& job, Instant at) {
    auto reply = only_reply(core.turn("c", status_request(request, job), at));
    REQUIRE(reply.envelope().isJobStatus());
    return nlohmann::json::parse(wire::text(reply.envelope().getJobStatus().getText()));
  };
  constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

  // Room: the store's facts, no warning.
  auto doc = status_at(2, "", kNow);
  CHECK(doc["store_disk"]["free_bytes"] == std::uint64_t{1} << 40);  // the virtual world's
  CHECK(doc["store_disk"]["store_bytes"].get<std::uint64_t>() > 0);
  CHECK(doc["store_disk"]["map_bytes"] == 4 * kGiB);  // the store's first map
  CHECK(doc["store_disk"]["map_limit_bytes"] == 1024 * kGiB);
  CHECK_FALSE(doc.contains("disk_warning"));

  // 512 MiB free: warned of, with the values and what to do, while the
  // coordinator still takes work.
  core.world().set_free_bytes(greeter.store, kGiB / 2);
  doc = status_at(3, "", kNow + std::chrono::seconds(2));
  CHECK(doc["store_disk"]["free_bytes"] == kGiB / 2);
  REQUIRE(doc.contains("disk_warning"));
  CHECK_THAT(doc["disk_warning"].get<std::string>(),
             Catch::Contains("the disk holding the store " + greeter.store.string() +
                             " has 512.0 MiB (536870912 bytes) free, under 1.0 GiB") &&
                 Catch::Contains("free space on that disk, or move the store to a larger one"));
  CHECK_FALSE(doc.contains("store_full"));
  auto accepted = only_reply(
      core.turn("c", untokened_submission(4, greeter.trial, 2), kNow + std::chrono::seconds(2)));
  REQUIRE(accepted.envelope().isJobAccepted());
  const std::string job = wire::text(accepted.envelope().getJobAccepted().getJob());
  // One job's status warns too.
  CHECK_THAT(status_at(5, job, kNow + std::chrono::seconds(2))["disk_warning"].get<std::string>(),
             Catch::Contains("512.0 MiB"));

  // The disk is looked at once a second of the core's clock: room made
  // within the second is seen at the next look.
  core.world().set_free_bytes(greeter.store, 3 * kGiB);
  doc = status_at(6, "", kNow + std::chrono::milliseconds(2'500));
  CHECK(doc["store_disk"]["free_bytes"] == kGiB / 2);
  CHECK(doc.contains("disk_warning"));
  doc = status_at(7, "", kNow + std::chrono::seconds(4));
  CHECK(doc["store_disk"]["free_bytes"] == 3 * kGiB);
  CHECK_FALSE(doc.contains("disk_warning"));

  // A disk that cannot tell its free space: no warning of it, and null.
  core.world().set_free_bytes(greeter.store, std::nullopt);
  doc = status_at(8, "", kNow + std::chrono::seconds(6));
  CHECK(doc["store_disk"]["free_bytes"].is_null());
  CHECK_FALSE(doc.contains("disk_warning"));
}

namespace {

std::string worker_hello(std::uint64_t request, const std::string& id, std::uint32_t slots) {
  capnp::MallocMessageBuilder message;
  auto hello = wire::start(message, request).initWorkerHello();
  hello.setWorkerId(id);
  hello.setSlots(slots);
  hello.setIsolation("{}");
  return wire::encode(message);
}

std::string request_work(std::uint64_t request, std::uint32_t free = 1) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).initRequestWork().setFreeSlots(free);
  return wire::encode(message);
}

// A report of `trial` whose one event has the id `event_id`.
std::string report_with_event(std::uint64_t request, schema::wire::TrialRef::Reader trial,
                              const std::string& event_id) {
  capnp::MallocMessageBuilder message;
  auto report = wire::start(message, request).initReport();
  report.setTrial(trial);
  report.setOutcome(schema::TrialOutcome::COMPLETED);
  report.setDetail("ran");
  auto event = report.initEvents(1)[0];
  event.setId(event_id);
  event.setType("note.added");
  event.setPayload("{}");
  event.setTimestamp("2026-01-05T10:00:00Z");
  event.getActor().setActorName("candidate");
  return wire::encode(message);
}

std::string results_request(std::uint64_t request, const std::string& job) {
  capnp::MallocMessageBuilder message;
  auto results = wire::start(message, request).initResultsRequest();
  results.setJob(job);
  results.setLimit(10);
  return wire::encode(message);
}

}  // namespace

namespace {

// A job of three trials of `greeter`, leased to worker w1, whose reports
// arrive in one turn: trial 1's names evt_001, which is in every fork's
// inherited history, so the rules every delta is held to pass it and the
// store refuses it; 0 and 2 append evt_new. Returns the job's id; `acks`
// gets the reports' answers.
std::string three_reports_in_a_turn(CoordinatorCore& core, const GreeterStore& greeter,
                                    std::vector<std::pair<std::string, std::string>>& acks,
                                    unsigned trials = 3) {
  auto accepted = only_reply(core.turn("c", untokened_submission(2, greeter.trial, trials), kNow));
  REQUIRE(accepted.envelope().isJobAccepted());
  const std::string job = wire::text(accepted.envelope().getJobAccepted().getJob());
  REQUIRE(only_reply(core.turn("w", worker_hello(3, "w1", 3), kNow)).envelope().isWelcome());
  auto work = only_reply(core.turn("w", request_work(4, 3), kNow));
  REQUIRE(work.envelope().isAssignments());
  const auto assignments = work.envelope().getAssignments().getAssignments();
  REQUIRE(assignments.size() == 3);
  std::vector<CoordinatorCore::Frame> reports;
  for (unsigned i = 0; i < 3; ++i) {
    reports.push_back({"w", report_with_event(10 + i, assignments[i].getTrial(),
                                              i == 1 ? "evt_001" : "evt_new")});
  }
  acks = core.turn(reports, kNow);
  REQUIRE(acks.size() == 3);
  return job;
}

}  // namespace

// The path the simulation takes for a share of its reports
// (simulation/simulator.cc, kRefusedDeltas): the same code, so the same
// answer. The three reports arrive in one turn, as a daemon's commit window
// gathers them, and share its transaction until the store refuses it.
TEST_CASE("reports sharing a turn: the one whose delta the store refuses costs only its delta",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  std::vector<std::pair<std::string, std::string>> acks;
  const std::string job = three_reports_in_a_turn(core, greeter, acks);
  for (const auto& [route, frame] : acks) {
    auto ack = wire::decode(frame);
    REQUIRE(ack.has_value());
    REQUIRE(ack->envelope().isReportAck());
    CHECK(ack->envelope().getReportAck().getVerdict() == schema::wire::ReportVerdict::ACCEPTED);
  }

  auto results = only_reply(core.turn("c", results_request(6, job), kNow));
  REQUIRE(results.envelope().isResults());
  const auto lines = results.envelope().getResults().getLines();
  REQUIRE(lines.size() == 3);
  for (unsigned i = 0; i < 3; ++i) {
    const std::string line = wire::text(lines[i]);
    INFO(line);
    CHECK_THAT(line, Catch::Contains(R"("status":"reconciled")"));
    if (i == 1) {
      CHECK_THAT(line, Catch::Contains(R"("outcome":"crashed")") &&
                           Catch::Contains("the store refused the child's delta") &&
                           Catch::Contains(R"("events_appended":0)"));
    } else {
      CHECK_THAT(line, Catch::Contains(R"("outcome":"completed")") &&
                           Catch::Contains(R"("events_appended":1)"));
    }
  }
}

TEST_CASE("an offer of slots with no work waits at the coordinator until work comes",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  REQUIRE(only_reply(core.turn("w", worker_hello(1, "waiting", 2), kNow)).envelope().isWelcome());
  // With no job, the offer is held, then answered empty after a second.
  CHECK(core.turn("w", request_work(2, 2), kNow).empty());
  CHECK(core.turn({}, kNow + std::chrono::milliseconds(999)).empty());
  auto empty = only_reply(core.turn({}, kNow + std::chrono::seconds(1)));
  REQUIRE(empty.envelope().isAssignments());
  CHECK(empty.envelope().getRequestId() == 2);
  CHECK(empty.envelope().getAssignments().getAssignments().size() == 0);
  // Offered again, it is answered in the turn a job comes.
  const Instant later = kNow + std::chrono::seconds(2);
  CHECK(core.turn("w", request_work(3, 2), later).empty());
  const auto replies = core.turn("c", untokened_submission(4, greeter.trial, 3), later);
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].first == "c");
  CHECK(replies[1].first == "w");
  auto work = wire::decode(replies[1].second);
  REQUIRE(work.has_value());
  REQUIRE(work->envelope().isAssignments());
  CHECK(work->envelope().getRequestId() == 3);
  CHECK(work->envelope().getAssignments().getAssignments().size() == 2);
}

namespace {

// A submission of `trials` copies of `trial` under `token`.
std::string tokened_submission(std::uint64_t request, const std::string& token,
                               const std::string& trial, unsigned trials) {
  capnp::MallocMessageBuilder message;
  auto job = wire::start(message, request).initSubmitJob();
  job.setName("twice");
  job.setToken(token);
  auto specs = job.initSpecs(trials);
  for (unsigned i = 0; i < trials; ++i) specs.set(i, trial);
  return wire::encode(message);
}

}  // namespace

TEST_CASE("a submission sent again under its token makes one job", "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  for (std::uint64_t request : {10, 11}) {
    auto answer = only_reply(
        core.turn("c", tokened_submission(request, "0123456789abcdef", greeter.trial, 2), kNow));
    REQUIRE(answer.envelope().isJobAccepted());
    CHECK(wire::text(answer.envelope().getJobAccepted().getJob()) == "job_0123456789abcdef");
    CHECK(answer.envelope().getJobAccepted().getTotal() == 2);
  }
  auto other_size = only_reply(
      core.turn("c", tokened_submission(12, "0123456789abcdef", greeter.trial, 3), kNow));
  REQUIRE(other_size.envelope().isError());
  CHECK(other_size.envelope().getError().getCode() == schema::wire::ErrorCode::CONFLICT);
  CHECK(wire::text(other_size.envelope().getError().getMessage()) ==
        "token 0123456789abcdef already names job job_0123456789abcdef (\"twice\", 2 "
        "trials); a new submission needs a new token");
  auto upper = only_reply(
      core.turn("c", tokened_submission(13, "0123456789ABCDEF", greeter.trial, 1), kNow));
  REQUIRE(upper.envelope().isError());
  CHECK(upper.envelope().getError().getCode() == schema::wire::ErrorCode::INVALID_ARGUMENT);
  // A candidate that is not a name is refused, not taken or thrown over.
  std::string numbered = greeter.trial;
  numbered.replace(numbered.find(R"("candidate":"greeter")"), 21, R"("candidate":5)");
  auto refused =
      only_reply(core.turn("c", tokened_submission(14, "fedcba9876543210", numbered, 1), kNow));
  REQUIRE(refused.envelope().isError());
  CHECK(refused.envelope().getError().getCode() == schema::wire::ErrorCode::INVALID_ARGUMENT);
  CHECK_THAT(wire::text(refused.envelope().getError().getMessage()),
             Catch::Contains("\"candidate\" is a name (a string)"));
  auto status = only_reply(core.turn("c", status_request(15, ""), kNow));
  CHECK_THAT(wire::text(status.envelope().getJobStatus().getText()),
             Catch::Contains("job_0123456789abcdef") && !Catch::Contains("fedcba9876543210"));
}

namespace {

std::string heartbeat(std::uint64_t request,
                      const std::vector<std::pair<std::uint32_t, std::uint32_t>>& running,
                      const std::string& job) {
  capnp::MallocMessageBuilder message;
  auto list = wire::start(message, request)
                  .initHeartbeat()
                  .initRunning(static_cast<unsigned>(running.size()));
  for (unsigned i = 0; i < running.size(); ++i) {
    list[i].setJob(job);
    list[i].setIndex(running[i].first);
    list[i].setAttempt(running[i].second);
  }
  return wire::encode(message);
}

// A client ("c") says hello and submits `trials` greeter trials under the
// token 0123456789abcdef: job_0123456789abcdef, which it returns.
std::string submit_tokened_job(CoordinatorCore& core, const GreeterStore& greeter,
                               unsigned trials) {
  only_reply(core.turn("c", client_hello(1), kNow));
  REQUIRE(
      only_reply(
          core.turn("c", tokened_submission(2, "0123456789abcdef", greeter.trial, trials), kNow))
          .envelope()
          .isJobAccepted());
  return "job_0123456789abcdef";
}

// The orchestration log's records by type, and its other events by theirs,
// as a restarting coordinator reads them.
std::map<std::string, std::size_t> logged_types(const std::filesystem::path& path) {
  std::map<std::string, std::size_t> types;
  store::EventStore store(path);
  const auto read = read_log(
      store.snapshot(),
      [&](OrchestrationRecord&& record) { ++types[std::string(record_type(record))]; },
      [&](const store::EventView& e) { ++types[std::string(e.type)]; });
  REQUIRE(read.has_value());
  return types;
}

}  // namespace

TEST_CASE("a worker that merely runs adds no record, and a restart renews what it holds",
          "[coordinator][core]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const TrialId first{JobId("job_0123456789abcdef"), 0};
  // Within the trials' deadline (their run limit and a lease each side).
  const Instant later = kNow + std::chrono::seconds(90);
  {
    CoordinatorCore core(config, quiet);
    submit_tokened_job(core, greeter, 2);
    REQUIRE(only_reply(core.turn("w", worker_hello(3, "runner", 2), kNow)).envelope().isWelcome());
    auto work = only_reply(core.turn("w", request_work(4, 2), kNow));
    REQUIRE(work.envelope().getAssignments().getAssignments().size() == 2);
    // Ninety seconds of heartbeats, one a second, naming both trials: the
    // leases (30 s) hold, and the log does not grow.
    std::uint64_t request = 5;
    for (Instant now = kNow + std::chrono::seconds(1); now <= later;
         now += std::chrono::seconds(1)) {
      const auto replies =
          core.turn("w", heartbeat(request++, {{0, 1}, {1, 1}}, first.job.str()), now);
      REQUIRE(replies.size() == 1);
      REQUIRE(wire::decode(replies[0].second)->envelope().isOk());
    }
    const auto leased = core.scheduler().trial_state(first);
    CHECK(leased->status == TrialStatus::leased);
    CHECK(*leased->lease_expires == later + ServerConfig{}.scheduler.lease_duration);
    CHECK(core.scheduler().worker_status(WorkerId("runner"))->last_seen == later);
  }
  // The job, the worker's hello and the two leases: nothing of the
  // heartbeats.
  const auto after = logged_types(config.store);
  CHECK(after == std::map<std::string, std::size_t>{
                     {"job.submitted", 1}, {"trial.leased", 2}, {"worker.joined", 1}});

  // Restarted 30 s later, past the expiries the log holds: recovery renews
  // the leases from the restart, and the worker is heard of then.
  const Instant restart = later + std::chrono::seconds(30);
  {
    CoordinatorCore restarted(config, quiet, 0, restart);
    const auto renewed = restarted.scheduler().trial_state(first);
    CHECK(renewed->status == TrialStatus::leased);
    CHECK(*renewed->lease_expires == restart + ServerConfig{}.scheduler.lease_duration);
    CHECK(restarted.scheduler().worker_status(WorkerId("runner"))->alive);
  }
  // Recovery, in memory too, wrote nothing.
  CHECK(logged_types(config.store) == after);
}

TEST_CASE("gc deletes the forks a policy no longer keeps, never a result or a user's run",
          "[coordinator][core][gc]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  std::string job;
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    // Trial 1's delta is refused: it is recorded crashed. 0 and 2 complete.
    std::vector<std::pair<std::string, std::string>> acks;
    job = three_reports_in_a_turn(core, greeter, acks);
    // A second job stays queued: unfinished, never touched.
    REQUIRE(only_reply(core.turn("c", untokened_submission(20, greeter.trial, 1), kNow))
                .envelope()
                .isJobAccepted());
  }
  const auto fork = [&](unsigned index) {
    return "run_" + job + "_" + std::to_string(index) + "_a1";
  };
  {
    // A user forks trial 2's fork, and a local trial left a fork.
    store::EventStore events(config.store);
    REQUIRE(events.fork(store::RunId(fork(2)), store::EventId("evt_new"),
                        {.id = store::RunId("run_mine")}));
    REQUIRE(events.fork(store::RunId("run_chat"), store::EventId("evt_031"),
                        {.id = store::RunId("run_trial_0123456789abcdef")}));
  }
  const std::string store = config.store.string();
  const auto gc = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"gc", "--store", store, "--json"});
    const auto result = forktrial::testing::run_forktrial(args);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return nlohmann::json::parse(result.out);
  };
  const auto runs = [&] {
    std::set<std::string> ids;
    const auto listed =
        forktrial::testing::run_forktrial({"run", "ls", "--all", "--store", store, "--json"});
    for (const auto& run : nlohmann::json::parse(listed.out)) ids.insert(run["id"]);
    return ids;
  };
  const auto all = runs();

  // A dry run plans: trial 0's fork (completed); trial 1's is a failure,
  // trial 2's is forked from.
  auto planned = gc({"--keep", "failures", "--dry-run"});
  CHECK(planned["forks_planned"] == 1);
  CHECK(planned["forks_deleted"] == 0);
  CHECK(planned["forks_kept"] == 1);
  CHECK(planned["forks_forked_from"] == 1);
  CHECK(planned["local_forks_kept"] == 1);
  CHECK(planned["jobs_collected"] == 1);
  CHECK(planned["jobs_unfinished"] == 1);
  CHECK(runs() == all);
  // The job finished in 2023: not 5000 days ago.
  CHECK(gc({"--keep", "none", "--older-than", "5000d", "--dry-run"})["jobs_too_recent"] == 1);

  auto failures = gc({"--keep", "failures"});
  CHECK(failures["forks_deleted"] == 1);
  CHECK(failures["events_deleted"] == 1);
  CHECK(failures["bytes_freed"].get<std::uint64_t>() > 0);
  auto left = all;
  left.erase(fork(0));
  CHECK(runs() == left);

  auto none = gc({"--keep", "none"});
  CHECK(none["forks_deleted"] == 2);  // trial 1's, and the local trial's
  CHECK(none["forks_already_gone"] == 1);
  CHECK(none["forks_forked_from"] == 1);
  left.erase(fork(1));
  left.erase("run_trial_0123456789abcdef");
  CHECK(runs() == left);
  CHECK(left.contains("run_chat"));
  CHECK(left.contains("run_mine"));
  CHECK(left.contains(fork(2)));
  CHECK(left.contains("forktrial.orchestration"));

  // Every result stands, read by a restarted coordinator.
  {
    CoordinatorCore restarted(config, quiet);
    only_reply(restarted.turn("c", client_hello(30), kNow));
    auto results = only_reply(restarted.turn("c", results_request(31, job), kNow));
    const auto lines = results.envelope().getResults().getLines();
    REQUIRE(lines.size() == 3);
    CHECK_THAT(wire::text(lines[0]), Catch::Contains(R"("outcome":"completed")") &&
                                         Catch::Contains(R"("fork_run_id":")" + fork(0)));
    CHECK_THAT(wire::text(lines[1]), Catch::Contains(R"("outcome":"crashed")"));
  }

  // The compacted copy holds the same runs, in a file no larger.
  const auto copy = config.store.parent_path() / "compacted";
  const auto compacted = forktrial::testing::run_forktrial(
      {"compact", "--store", store, "--output", copy.string(), "--json"});
  INFO(compacted.err);
  REQUIRE(compacted.exit_code == 0);
  const auto sizes = nlohmann::json::parse(compacted.out);
  CHECK(sizes["bytes_after"].get<std::uint64_t>() <= sizes["bytes_before"].get<std::uint64_t>());
  {
    store::EventStore copied(copy);
    std::set<std::string> ids;
    for (const auto& run : copied.snapshot().runs()) ids.insert(run.id.str());
    CHECK(ids == left);
  }
  const auto again =
      forktrial::testing::run_forktrial({"compact", "--store", store, "--output", copy.string()});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Catch::Contains("exists; give a new directory"));
  const auto bad = forktrial::testing::run_forktrial({"gc", "--store", store, "--keep", "some"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("give all, failures or none"));
}

TEST_CASE("a result is recorded as a verdict and read back whole, an older log's line as written",
          "[coordinator][core]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  std::string job;
  std::vector<std::string> served;
  const auto lines_of = [](CoordinatorCore& core, std::uint64_t request, const std::string& id) {
    auto results = only_reply(core.turn("c", results_request(request, id), kNow));
    std::vector<std::string> lines;
    for (auto line : results.envelope().getResults().getLines()) lines.push_back(wire::text(line));
    return lines;
  };
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    std::vector<std::pair<std::string, std::string>> acks;
    // Four trials, three reported: the job has not finished.
    job = three_reports_in_a_turn(core, greeter, acks, 4);
    served = lines_of(core, 6, job);
  }
  REQUIRE(served.size() == 4);
  // The stored verdict holds what the store and the worker established, not
  // the specification the job holds.
  // A reconciled trial is one trial.settled event: its report, its
  // reconciliation and its verdict.
  std::string verdict;
  std::uint64_t head = 0;
  std::map<std::string, int> types;
  {
    store::EventStore events(config.store);
    const auto snapshot = events.snapshot();
    const auto log = *snapshot.run(kOrchestrationRun);
    head = log.head;
    snapshot.for_each_event(log, 1, [&](const store::EventView& e) {
      ++types[std::string(e.type)];
      if (e.type == "trial.settled" && verdict.empty()) verdict = std::string(e.payload);
      return true;
    });
  }
  CHECK(types["trial.settled"] == 3);
  CHECK(types["trial.reconciled"] + types["trial.verdict"] == 0);
  // The store refused the turn's transaction (trial 1's delta), so each
  // report was reconciled alone: the first transaction wrote the turn's
  // three reports, folding in only its own.
  CHECK(types["trial.reported"] == 2);
  CHECK_THAT(verdict,
             Catch::Contains(R"("outcome":"completed")") && Catch::Contains(R"("reported_at":)") &&
                 Catch::Contains(R"("events_appended":1,)") &&
                 // defaults are left out
                 !Catch::Contains("isolation") && !Catch::Contains("exit_code") &&
                 !Catch::Contains("executor") && !Catch::Contains("behavior_failures_after_fork") &&
                 !Catch::Contains("expected_bundle_hash") && !Catch::Contains("pin"));
  const auto line = nlohmann::json::parse(served[0]);
  for (const char* key : {"trial",
                          "job",
                          "index",
                          "candidate",
                          "pin",
                          "scenario",
                          "at",
                          "status",
                          "outcome",
                          "exit_code",
                          "detail",
                          "warnings",
                          "worker",
                          "attempts",
                          "fork_run_id",
                          "events_appended",
                          "behavior_failures",
                          "behavior_failures_after_fork",
                          "duration_ms",
                          "executor",
                          "limit",
                          "isolation"}) {
    CHECK(line.contains(key));
  }
  CHECK(line["candidate"] == "greeter");
  // and read back as their defaults
  CHECK(line["exit_code"] == 0);
  CHECK(line["behavior_failures"] == 1);  // in the parent's history
  CHECK(line["behavior_failures_after_fork"] == 0);
  // Each reconciled trial of that fork point counts it, the parent's
  // history read once.
  for (const std::size_t i : {1, 2}) {
    CHECK(nlohmann::json::parse(served[i])["behavior_failures"] == 1);
  }
  CHECK(line["executor"]["name"] == "lua");
  CHECK(line["fork_run_id"] == "run_" + job + "_0_a1");
  CHECK(line["isolation"].is_object());
  {
    // A whole result line, as older coordinators wrote it, for trial 2, and
    // a trial.verdict event, as coordinators wrote before trial.settled, for
    // trial 1.
    store::EventStore events(config.store);
    store::NewEvent older;
    older.id = store::numbered_event_id(head + 1);
    older.type = "trial.result";
    older.payload = R"({"trial":")" + job + R"(#2","job":")" + job +
                    R"(","index":2,"outcome":"completed","detail":"written whole"})";
    older.timestamp = "2026-01-05T10:00:00Z";
    store::NewEvent cut = older;
    cut.id = store::numbered_event_id(head + 2);
    cut.type = "trial.verdict";
    cut.payload = R"({"job":")" + job +
                  R"(","index":1,"attempt":1,"worker":"w1","outcome":"crashed",)"
                  R"("exit_code":1,"detail":"a verdict event","events_appended":4})";
    REQUIRE(events.append(kOrchestrationRun, head, std::vector{older, cut}));
  }
  std::vector<std::string> lines;
  {
    // A coordinator that compacts the log at once: the results of every
    // kind of event (a trial.settled's verdict, a trial.verdict, a whole
    // line) read the same from the snapshot, before and after a restart.
    ServerConfig compacting = config;
    compacting.compact_log_after = 1;
    std::vector<std::string> before;
    {
      CoordinatorCore core(compacting, quiet);
      only_reply(core.turn("c", client_hello(6), kNow));  // its end compacts the log
      before = lines_of(core, 7, job);
    }
    REQUIRE(before.size() == 4);
    CHECK(before[0] == served[0]);
    CHECK(before[3] == served[3]);
    CHECK(nlohmann::json::parse(before[1])["detail"] == "a verdict event");
    CHECK(before[2] == R"({"trial":")" + job + R"(#2","job":")" + job +
                           R"(","index":2,"outcome":"completed","detail":"written whole"})");
    std::map<std::string, int> compacted;
    {
      store::EventStore events(config.store);
      const auto snapshot = events.snapshot();
      const auto log = *snapshot.run(kOrchestrationRun);
      snapshot.for_each_event(log, 1, [&](const store::EventView& e) {
        ++compacted[std::string(e.type)];
        if (auto marker = log_snapshot_of(e)) {
          CHECK(marker->generation == 1);
          CHECK(marker->replaced_events >= head + 2);  // and what its start recorded
          CHECK(marker->seq == e.seq);
        }
        return true;
      });
    }
    CHECK(compacted["log.snapshot"] == 1);
    CHECK(compacted["trial.settled"] + compacted["trial.reported"] == 0);
    CHECK(compacted["trial.verdict"] == 2);  // trial 0's settled verdict, and trial 1's
    CHECK(compacted["trial.result"] == 1);   // trial 2's whole line
    CHECK(compacted["trial.restored"] == 3);
    CoordinatorCore again(config, quiet);
    only_reply(again.turn("c", client_hello(8), kNow));
    CHECK(lines_of(again, 9, job) == before);
  }
  {
    CoordinatorCore restarted(config, quiet);
    only_reply(restarted.turn("c", client_hello(7), kNow));
    lines = lines_of(restarted, 8, job);
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == served[0]);  // the same line after a restart
    CHECK(lines[3] == served[3]);
    CHECK(nlohmann::json::parse(lines[3])["status"] == "queued");
    CHECK_FALSE(restarted.scheduler().job_status(JobId(job))->archived);

    // The last trial ends: the job has finished, and is archived at the end
    // of the turn. Its lines read the same from the archive, the older
    // log's ones too.
    REQUIRE(
        only_reply(restarted.turn("w", worker_hello(20, "w1", 3), kNow)).envelope().isWelcome());
    auto work = only_reply(restarted.turn("w", request_work(21, 1), kNow));
    const auto assignments = work.envelope().getAssignments().getAssignments();
    REQUIRE(assignments.size() == 1);
    REQUIRE(assignments[0].getTrial().getIndex() == 3);
    restarted.turn("w", report_with_event(22, assignments[0].getTrial(), "evt_new"), kNow);
    const auto status = restarted.scheduler().job_status(JobId(job));
    CHECK(status->finished());
    CHECK(status->archived);
    CHECK(restarted.scheduler().trial_state(TrialId{JobId(job), 0}) == std::nullopt);
    CHECK(restarted.archived_status(TrialId{JobId(job), 3}) == TrialStatus::reconciled);
    const auto archived = lines_of(restarted, 23, job);
    REQUIRE(archived.size() == 4);
    for (std::size_t i = 0; i < 3; ++i) CHECK(archived[i] == lines[i]);
    CHECK(nlohmann::json::parse(archived[3])["status"] == "reconciled");
    lines[3] = archived[3];
  }
  {
    // The archive: one event per trial, then job.archived in the log.
    store::EventStore events(config.store);
    const auto snapshot = events.snapshot();
    const auto archive = snapshot.run(archive_run_of(JobId(job)));
    REQUIRE(archive.has_value());
    CHECK(archive->head == 4);
    const auto log = *snapshot.run(kOrchestrationRun);
    CHECK(snapshot.events_of_type(log, "job.archived").size() == 1);
  }
  // After a restart, the archived job is read from its archive alone.
  CoordinatorCore again(config, quiet);
  only_reply(again.turn("c", client_hello(30), kNow));
  CHECK(lines_of(again, 31, job) == lines);
  CHECK(again.scheduler().job_status(JobId(job))->archived);
  {
    const auto from_verdict = nlohmann::json::parse(lines[1]);
    CHECK(from_verdict["outcome"] == "crashed");
    CHECK(from_verdict["detail"] == "a verdict event");
    CHECK(from_verdict["exit_code"] == 1);
    CHECK(from_verdict["worker"] == "w1");
    CHECK(from_verdict["events_appended"] == 4);
    CHECK(from_verdict["candidate"] == "greeter");
  }
  CHECK(lines[2] == R"({"trial":")" + job + R"(#2","job":")" + job +
                        R"(","index":2,"outcome":"completed","detail":"written whole"})");
}

namespace {

// The records and other events a read of the store's log hands over, and
// its last snapshot.
struct LogRead {
  std::uint64_t records = 0;
  std::uint64_t events = 0;
  std::optional<LogSnapshot> snapshot;
};

LogRead read_store_log(const std::filesystem::path& path) {
  store::EventStore events(path);
  const auto snapshot = events.snapshot();
  LogRead read;
  const auto done = read_log(
      snapshot,
      [&](OrchestrationRecord&&) {
        ++read.records;
        ++read.events;
      },
      [&](const store::EventView& e) {
        ++read.events;
        if (auto marker = log_snapshot_of(e)) read.snapshot = marker;
      });
  REQUIRE(done.has_value());
  return read;
}

GcPlan gc_plan(const std::filesystem::path& path) {
  store::EventStore events(path);
  auto plan = plan_gc(events.snapshot(), RetentionPolicy{KeepForks::failures, Duration(0)},
                      kNow + std::chrono::hours(1));
  REQUIRE(plan.has_value());
  return *plan;
}

}  // namespace

TEST_CASE("after a long history a restart reads the live state, and answers as before",
          "[coordinator][core][snapshot]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  config.compact_log_after = 40;
  config.compact_log_ratio = 1;
  std::uint64_t written = 0;  // records committed over the whole history
  config.committed = [&](std::span<const OrchestrationRecord> records) {
    written += records.size();
  };
  constexpr unsigned kJobs = 100;
  std::vector<std::string> jobs;
  std::map<std::string, std::vector<std::string>> served;
  std::string statuses;
  std::uint64_t request = 1;
  const auto lines_of = [&](CoordinatorCore& core, const std::string& job) {
    auto results = only_reply(core.turn("c", results_request(++request, job), kNow));
    std::vector<std::string> lines;
    for (auto line : results.envelope().getResults().getLines()) lines.push_back(wire::text(line));
    return lines;
  };
  const auto status_of = [&](const Scheduler& scheduler) {
    std::string text;
    for (const JobStatus& job : scheduler.jobs()) {
      text += job.id.str() + " " + std::string(job.state()) + " " +
              std::to_string(job.count(TrialStatus::reconciled)) + " " +
              std::to_string(job.archived) + "\n";
    }
    return text;
  };
  const auto ranking_of = [&](const std::vector<std::string>& lines) {
    CandidateTally tally;
    for (const std::string& line : lines) tally.add_result(nlohmann::ordered_json::parse(line));
    std::string text;
    for (const CandidateRank& rank : tally.ranked()) {
      text += candidate_rank_json(rank).dump() + "\n";
    }
    return text;
  };
  {
    CoordinatorCore core(config, quiet, 0, kNow);
    only_reply(core.turn("c", client_hello(++request), kNow));
    REQUIRE(
        only_reply(core.turn("w", worker_hello(++request, "w1", 4), kNow)).envelope().isWelcome());
    // Jobs of three trials run one after another; the last one is left with
    // a trial queued, one leased and one reconciled.
    for (unsigned j = 0; j < kJobs; ++j) {
      auto accepted =
          only_reply(core.turn("c", untokened_submission(++request, greeter.trial, 3), kNow));
      REQUIRE(accepted.envelope().isJobAccepted());
      jobs.push_back(wire::text(accepted.envelope().getJobAccepted().getJob()));
      const bool last = j + 1 == kJobs;
      auto work = only_reply(core.turn("w", request_work(++request, last ? 2 : 3), kNow));
      const auto assignments = work.envelope().getAssignments().getAssignments();
      REQUIRE(assignments.size() == (last ? 2 : 3));
      for (unsigned i = 0; i < (last ? 1 : 3); ++i) {
        core.turn("w", report_with_event(++request, assignments[i].getTrial(), "evt_new"), kNow);
      }
    }
    for (const std::string& job : jobs) served[job] = lines_of(core, job);
    statuses = status_of(core.scheduler());
    CHECK(core.scheduler().job_status(JobId(jobs.back()))->count(TrialStatus::leased) == 1);
  }
  const GcPlan plan = gc_plan(config.store);
  CHECK(plan.jobs_collected == kJobs - 1);
  const LogRead read = read_store_log(config.store);
  REQUIRE(read.snapshot.has_value());
  CHECK(read.snapshot->generation >= 3);
  // What a restart reads: the snapshot (a summary per archived job, the
  // live job, its trials that moved on, the worker, the results of the
  // live job's reconciled trial and the marker), then at most as much
  // again (or 40): a bound in the live state, not in the history.
  CHECK(read.snapshot->seq <= kJobs + 8);
  CHECK(read.events <= 2 * read.snapshot->seq + 40);
  CHECK(read.records * 3 < written);
  // A restart answers as before: results, statuses, the candidates'
  // ranking, gc.
  {
    CoordinatorCore restarted(config, quiet, 0, kNow);  // its leases renewed at kNow
    only_reply(restarted.turn("c", client_hello(++request), kNow));
    CHECK(status_of(restarted.scheduler()) == statuses);
    for (const std::string& job : jobs) {
      INFO(job);
      const auto lines = lines_of(restarted, job);
      CHECK(lines == served[job]);
      CHECK(ranking_of(lines) == ranking_of(served[job]));
    }
    // The live job goes on: its leased trial's report is taken.
    CHECK(restarted.scheduler().job_status(JobId(jobs.back()))->count(TrialStatus::leased) == 1);
  }
  CHECK(gc_plan(config.store) == plan);
}

TEST_CASE("a job's own retention is recorded with it and rules gc over the default",
          "[coordinator][core][gc]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const auto submission = [&](std::uint64_t request, const std::string& keep) {
    capnp::MallocMessageBuilder message;
    auto job = wire::start(message, request).initSubmitJob();
    job.setName(keep.empty() ? "default" : keep);
    job.setKeepForks(keep);
    job.setKeepForksAfterMillis(keep == "all" ? 86'400'000 : 0);
    job.initSpecs(1).set(0, greeter.trial);
    return wire::encode(message);
  };
  std::string kept;
  std::string plain;
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    const auto refused = only_reply(core.turn("c", submission(2, "most"), kNow));
    REQUIRE(refused.envelope().isError());
    CHECK(refused.envelope().getError().getCode() == schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK_THAT(wire::text(refused.envelope().getError().getMessage()),
               Catch::Contains("\"most\" is not a retention"));
    kept = wire::text(only_reply(core.turn("c", submission(3, "all"), kNow))
                          .envelope()
                          .getJobAccepted()
                          .getJob());
    plain = wire::text(
        only_reply(core.turn("c", submission(4, ""), kNow)).envelope().getJobAccepted().getJob());
    REQUIRE(only_reply(core.turn("w", worker_hello(5, "w1", 2), kNow)).envelope().isWelcome());
    auto work = only_reply(core.turn("w", request_work(6, 2), kNow));
    const auto assignments = work.envelope().getAssignments().getAssignments();
    REQUIRE(assignments.size() == 2);
    std::vector<CoordinatorCore::Frame> reports;
    for (unsigned i = 0; i < 2; ++i) {
      reports.push_back({"w", report_with_event(10 + i, assignments[i].getTrial(), "evt_new")});
    }
    REQUIRE(core.turn(reports, kNow).size() == 2);
    const auto status =
        nlohmann::json::parse(wire::text(only_reply(core.turn("c", status_request(20, kept), kNow))
                                             .envelope()
                                             .getJobStatus()
                                             .getText()));
    CHECK(status["keep_forks"] == nlohmann::json{{"keep", "all"}, {"after_ms", 86'400'000}});
  }
  // The job that keeps all its forks keeps them; the other goes by --keep.
  const auto result = forktrial::testing::run_forktrial(
      {"gc", "--store", config.store.string(), "--keep", "none", "--json"});
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto gc = nlohmann::json::parse(result.out);
  CHECK(gc["forks_deleted"] == 1);
  CHECK(gc["forks_kept"] == 1);
  CHECK(gc["jobs_collected"] == 2);
  CHECK(gc["jobs_own_policy"] == 1);
  store::EventStore events(config.store);
  CHECK(events.snapshot().run(store::RunId("run_" + kept + "_0_a1")).has_value());
  CHECK_FALSE(events.snapshot().run(store::RunId("run_" + plain + "_0_a1")).has_value());
}

namespace {

std::string goodbye(std::uint64_t request, const std::string& reason) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).initWorkerGoodbye().setReason(reason);
  return wire::encode(message);
}

}  // namespace

TEST_CASE("a worker's goodbye requeues its leases at once and leaves the others' alone",
          "[coordinator][core]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const JobId job("job_0123456789abcdef");
  const TrialId first{job, 0}, second{job, 1}, third{job, 2};
  // A second in: far inside the lease (30 s), so nothing could lapse yet.
  const Instant soon = kNow + std::chrono::seconds(1);
  {
    CoordinatorCore core(config, quiet);
    submit_tokened_job(core, greeter, 3);
    // Worker `id` joins from `route` with `slots` and offers `free` of them:
    // how many trials it is leased.
    auto join_and_lease = [&](const std::string& route, const std::string& id, std::uint32_t slots,
                              std::uint32_t free) {
      REQUIRE(
          only_reply(core.turn(route, worker_hello(3, id, slots), kNow)).envelope().isWelcome());
      return only_reply(core.turn(route, request_work(4, free), kNow))
          .envelope()
          .getAssignments()
          .getAssignments()
          .size();
    };
    REQUIRE(join_and_lease("r1", "w1", 2, 2) == 2);
    REQUIRE(join_and_lease("r2", "w2", 3, 1) == 1);
    REQUIRE(core.scheduler().trial_state(third)->worker == WorkerId("w2"));

    // A peer that never said hello, and a client, are refused; nothing moves.
    auto stranger = only_reply(core.turn("r3", goodbye(7, "stopped by SIGTERM"), soon));
    REQUIRE(stranger.envelope().isError());
    CHECK(stranger.envelope().getError().getCode() == schema::wire::ErrorCode::FAILED_PRECONDITION);
    auto client = only_reply(core.turn("c", goodbye(8, "stopped by SIGTERM"), soon));
    REQUIRE(client.envelope().isError());
    CHECK(client.envelope().getError().getCode() == schema::wire::ErrorCode::INVALID_ARGUMENT);
    CHECK(wire::text(client.envelope().getError().getMessage()) ==
          "a client may not send this message");
    CHECK(core.scheduler().worker_status(WorkerId("w1"))->alive);
    CHECK(core.scheduler().trial_state(first)->status == TrialStatus::leased);

    auto ok = only_reply(core.turn("r1", goodbye(9, "stopped by SIGTERM"), soon));
    REQUIRE(ok.envelope().isOk());
    CHECK(ok.envelope().getRequestId() == 9);
    // Lost now, not at its lease's end: both its trials are queued again
    // with the next attempt, saying why.
    CHECK_FALSE(core.scheduler().worker_status(WorkerId("w1"))->alive);
    CHECK(core.scheduler().worker_status(WorkerId("w2"))->alive);
    for (const TrialId& trial : {first, second}) {
      const auto state = core.scheduler().trial_state(trial);
      CHECK(state->status == TrialStatus::queued);
      CHECK(state->attempt == 2);
      REQUIRE(state->reasons.size() == 1);
      CHECK(state->reasons[0] == "worker w1 lost: it said goodbye: stopped by SIGTERM");
    }
    // The other worker's lease is untouched.
    const auto kept = core.scheduler().trial_state(third);
    CHECK(kept->status == TrialStatus::leased);
    CHECK(kept->attempt == 1);
    CHECK(kept->worker == WorkerId("w2"));
    // The route is forgotten: what it sends next is a stranger's.
    auto after = only_reply(core.turn("r1", heartbeat(10, {{0, 1}, {1, 1}}, job.str()), soon));
    REQUIRE(after.envelope().isError());
    CHECK(after.envelope().getError().getCode() == schema::wire::ErrorCode::FAILED_PRECONDITION);
    CHECK(wire::text(after.envelope().getError().getMessage()) ==
          "say hello first (workerHello or clientHello)");
    // The other worker is leased them in the same second.
    auto work = only_reply(core.turn("r2", request_work(11, 2), soon));
    const auto assignments = work.envelope().getAssignments().getAssignments();
    REQUIRE(assignments.size() == 2);
    for (auto assignment : assignments) CHECK(assignment.getTrial().getAttempt() == 2);
  }
  // In the log: w1's loss and the two requeues, before the new leases.
  const auto types = logged_types(config.store);
  CHECK(types.at("worker.lost") == 1);
  CHECK(types.at("trial.requeued") == 2);
  CHECK(types.at("trial.leased") == 5);
}

TEST_CASE("a held status is answered when its job finishes, or when its hold has passed",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  const std::string job = submit_tokened_job(core, greeter, 2);
  using std::chrono::milliseconds;
  auto status_of = [](const wire::Frame& frame) {
    REQUIRE(frame.envelope().isJobStatus());
    return nlohmann::json::parse(wire::text(frame.envelope().getJobStatus().getText()));
  };
  // Held for its second, then answered with the job still queued.
  CHECK(core.turn("c", status_request(3, job, 1000), kNow).empty());
  CHECK(core.turn({}, kNow + milliseconds(999)).empty());
  auto held = only_reply(core.turn({}, kNow + milliseconds(1000)));
  CHECK(held.envelope().getRequestId() == 3);
  CHECK(status_of(held)["finished"] == false);
  // A hold is at most ten seconds, however long it is asked for.
  Instant at = kNow + std::chrono::seconds(2);
  CHECK(core.turn("c", status_request(4, job, 600'000), at).empty());
  CHECK(core.turn({}, at + milliseconds(9999)).empty());
  CHECK(only_reply(core.turn({}, at + std::chrono::seconds(10))).envelope().getRequestId() == 4);
  // A later request of the same connection replaces the one it gave up on.
  at += std::chrono::seconds(20);
  CHECK(core.turn("c", status_request(5, job, 5000), at).empty());
  CHECK(core.turn("c", status_request(6, job, 5000), at).empty());
  // The job finishing answers it in that turn, the answer after the
  // cancellation's.
  only_reply(core.turn("d", client_hello(1), at));
  const auto replies = core.turn("d", cancel_request(2, job), at + milliseconds(10));
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].first == "d");
  CHECK(replies[1].first == "c");
  auto finished = wire::decode(replies[1].second);
  REQUIRE(finished.has_value());
  CHECK(finished->envelope().getRequestId() == 6);
  CHECK(status_of(*finished)["finished"] == true);
  CHECK(core.turn({}, at + std::chrono::seconds(6)).empty());  // 5 was dropped
  // A finished job's status, and an unknown job's error, are not held.
  at += std::chrono::seconds(7);
  CHECK(status_of(only_reply(core.turn("c", status_request(7, job, 5000), at)))["finished"] ==
        true);
  CHECK(only_reply(core.turn("c", status_request(8, "job_none", 5000), at)).envelope().isError());
}

TEST_CASE("a coordinator holds a bounded number of statuses, and answers the others at once",
          "[coordinator][core]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  const std::string job = submit_tokened_job(core, greeter, 1);
  std::size_t answered = 0;
  for (int i = 0; i < 1100; ++i) {
    const std::string route = "c" + std::to_string(i);
    only_reply(core.turn(route, client_hello(1), kNow));
    answered += core.turn(route, status_request(2, job, 5000), kNow).size();
  }
  CHECK(answered == 1100 - 1024);
  CHECK(core.turn({}, kNow + std::chrono::seconds(5)).size() == 1024);
}

// ---- The result cache (coordinator/result_cache.h): a trial already run is
// answered from its recorded result and fork, without a lease.

namespace {

// A job of `trials` (each its own specification text), submitted in one
// frame; `no_cache` as `--no-cache` sends it. Returns the job's id.
std::string submit_trials(CoordinatorCore& core, std::uint64_t request,
                          const std::vector<std::string>& trials, bool no_cache = false) {
  capnp::MallocMessageBuilder message;
  auto job = wire::start(message, request).initSubmitJob();
  job.setName("cached");
  job.setNoCache(no_cache);
  auto specs = job.initSpecs(static_cast<unsigned>(trials.size()));
  for (unsigned i = 0; i < trials.size(); ++i) specs.set(i, trials[i]);
  auto accepted = only_reply(core.turn("c", wire::encode(message), kNow));
  REQUIRE(accepted.envelope().isJobAccepted());
  return wire::text(accepted.envelope().getJobAccepted().getJob());
}

// The worker w1 is leased everything queued and reports each trial
// completed with one event of its own; returns how many it was leased.
std::size_t run_all(CoordinatorCore& core, std::uint64_t request) {
  // Said again to a restarted core: a new incarnation of w1.
  REQUIRE(
      only_reply(core.turn("w", worker_hello(request++, "w1", 8), kNow)).envelope().isWelcome());
  if (core.scheduler().queued_trials() == 0) return 0;
  auto work = only_reply(core.turn("w", request_work(request++, 8), kNow));
  REQUIRE(work.envelope().isAssignments());
  const auto assignments = work.envelope().getAssignments().getAssignments();
  std::vector<CoordinatorCore::Frame> reports;
  for (unsigned i = 0; i < assignments.size(); ++i) {
    reports.push_back({"w", report_with_event(request++, assignments[i].getTrial(), "evt_new")});
  }
  for (const auto& [route, frame] : core.turn(reports, kNow)) {
    REQUIRE(wire::decode(frame)->envelope().getReportAck().getVerdict() ==
            schema::wire::ReportVerdict::ACCEPTED);
  }
  return assignments.size();
}

std::vector<nlohmann::json> results_of(CoordinatorCore& core, const std::string& job) {
  auto results = only_reply(core.turn("c", results_request(90, job), kNow));
  std::vector<nlohmann::json> lines;
  for (auto line : results.envelope().getResults().getLines()) {
    lines.push_back(nlohmann::json::parse(wire::text(line)));
  }
  return lines;
}

// A core on `config`'s store, seeded `seed` (so that its job ids are its
// own), submits `trial` and, with `run`, runs what it queued: the job's
// status then (archived once finished).
JobStatus submitted_once(const ServerConfig& config, const std::string& trial, std::uint64_t seed,
                         bool run) {
  CoordinatorCore core(config, quiet, seed);
  only_reply(core.turn("c", client_hello(1), kNow));
  const std::string job = submit_trials(core, 2, {trial});
  if (run) run_all(core, 3);
  return *core.scheduler().job_status(JobId(job));
}

// The greeter's trial with `from` replaced by `to` in its text.
std::string changed(std::string trial, const std::string& from, const std::string& to) {
  const auto at = trial.find(from);
  REQUIRE(at != std::string::npos);
  return trial.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a deterministic trial run before is answered from the cache, naming its source",
          "[coordinator][core][cache]") {
  GreeterStore greeter;
  std::vector<nlohmann::json> source, answered;
  {
    ServerConfig config;
    config.store = greeter.store;
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    const std::string first = submit_trials(core, 2, {greeter.trial});
    CHECK(run_all(core, 3) == 1);

    // The same trial under another label (another batch's name): not leased,
    // reconciled in the turn of its submission.
    const std::string again = submit_trials(core, 20, {changed(greeter.trial, "\"t\"", "\"u\"")});
    const auto status = core.scheduler().job_status(JobId(again));
    CHECK(status->count(TrialStatus::reconciled) == 1);
    CHECK(status->cached == 1);
    CHECK(status->finished());
    CHECK(status->outcomes[0] == 1);  // completed
    CHECK(status->failed_attempts == 0);
    // Finished in the turn it was submitted, and archived at its end.
    CHECK(status->archived);
    CHECK(run_all(core, 30) == 0);
    CHECK(core.scheduler().job_status(JobId(first))->cached == 0);

    source = results_of(core, first);
    answered = results_of(core, again);
    REQUIRE(answered.size() == 1);
    CHECK(answered[0]["cached_from"] == first + "#0");
  }
  INFO(answered[0].dump());
  CHECK(source[0]["cached_from"].is_null());
  CHECK(answered[0]["outcome"] == "completed");
  CHECK(answered[0]["events_appended"] == 1);
  CHECK(answered[0]["detail"] == source[0]["detail"]);
  CHECK(answered[0]["duration_ms"] == 0);
  CHECK(answered[0]["worker"] == "");
  // Whose word it is: the worker that reported the source.
  CHECK(source[0]["cached_worker"].is_null());
  CHECK(answered[0]["cached_worker"] == source[0]["worker"]);
  CHECK_FALSE(answered[0]["cached_worker"].get<std::string>().empty());
  // Its own fork: a copy of the source's on the same fork point.
  const std::string fork = answered[0]["fork_run_id"];
  CHECK(fork != source[0]["fork_run_id"].get<std::string>());
  {
    store::EventStore store(greeter.store);
    const auto snapshot = store.snapshot();
    const auto copy = snapshot.run(store::RunId(fork));
    REQUIRE(copy);
    CHECK(copy->fork_of->event_id == store::EventId("evt_031"));
    const auto events = snapshot.history(*copy);
    CHECK(events.back().id == store::EventId("evt_new"));
    CHECK(events.size() == copy->fork_of->seq + 1);
  }
  // In the log: one trial.cached record, and the answer's verdict.
  const auto types = logged_types(greeter.store);
  CHECK(types.at("trial.cached") == 1);
  CHECK(types.at("trial.verdict") == 1);
}

TEST_CASE("repeats, --no-cache and a changed input run, and keep the cache as it was",
          "[coordinator][core][cache]") {
  GreeterCore fixture;
  auto& [greeter, config, core] = fixture;
  submit_trials(core, 2, {greeter.trial});
  REQUIRE(run_all(core, 3) == 1);

  SECTION("a matrix's repeats all run, and keep no entry") {
    const std::string repeats = submit_trials(core, 20, {greeter.trial, greeter.trial});
    CHECK(core.scheduler().job_status(JobId(repeats))->cached == 0);
    CHECK(run_all(core, 30) == 2);
  }
  SECTION("--no-cache runs it") {
    const std::string forced = submit_trials(core, 20, {greeter.trial}, true);
    CHECK(core.scheduler().job_status(JobId(forced))->cached == 0);
    CHECK(run_all(core, 30) == 1);
  }
  SECTION("another limit is another trial; once run, it is cached too") {
    const std::string other =
        changed(greeter.trial, "\"limits\":{}", R"("limits":{"max_events":7})");
    submit_trials(core, 20, {other});
    CHECK(run_all(core, 30) == 1);
    const std::string again = submit_trials(core, 40, {other});
    CHECK(core.scheduler().job_status(JobId(again))->cached == 1);
  }
  SECTION("another fork point is another trial") {
    submit_trials(core, 20, {changed(greeter.trial, "evt_031", "evt_030")});
    CHECK(run_all(core, 30) == 1);
  }
}

TEST_CASE("a trial of a candidate that does not declare itself deterministic always runs",
          "[coordinator][core][cache]") {
  GreeterStore greeter;
  const std::filesystem::path source(FORKTRIAL_SOURCE_DIR);
  const std::filesystem::path copy = greeter.dir.path() / "greeter";
  std::filesystem::copy(source / "examples/packs/greeter", copy,
                        std::filesystem::copy_options::recursive);
  std::ifstream in(copy / "manifest.toml");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = manifest.find("deterministic = true");
  REQUIRE(at != std::string::npos);
  manifest.replace(at, 20, "deterministic = false");
  std::filesystem::permissions(copy / "manifest.toml", std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::ofstream(copy / "manifest.toml") << manifest;
  auto archive = pack::archive_pack(copy);
  REQUIRE(archive);
  {
    store::EventStore store(greeter.store);
    store.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
  }
  ServerConfig config;
  config.store = greeter.store;
  CoordinatorCore core(config, quiet);
  only_reply(core.turn("c", client_hello(1), kNow));
  const std::string trial =
      R"({"candidate":"greeter","spec":{"at_event":"evt_031","candidate":{"root_dir":")" +
      wire::bundle_root(Sha256::of(archive->bytes)) + R"(","expected_bundle_hash":")" +
      archive->bundle_hash.str() +
      R"("},"extra_packs":[],"label":"t","limits":{},"parent_run_id":"run_chat",)"
      R"("scenario":"","schema_version":1}})";
  submit_trials(core, 20, {trial});
  CHECK(run_all(core, 30) == 1);
  const std::string again = submit_trials(core, 40, {trial});
  CHECK(core.scheduler().job_status(JobId(again))->cached == 0);
  CHECK(run_all(core, 50) == 1);
}

TEST_CASE("the cache survives a restart and its source's archive, and misses another runtime",
          "[coordinator][core][cache]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const JobStatus first_status = submitted_once(config, greeter.trial, 0, true);
  REQUIRE(first_status.archived);
  REQUIRE(first_status.cached == 0);
  const std::string first = first_status.id.str();
  const JobStatus again_status = submitted_once(config, greeter.trial, 1, false);
  CHECK(again_status.cached == 1);
  const std::string again = again_status.id.str();
  {
    // Replayed: the answer is the log's, and its line names its source.
    CoordinatorCore replayed(config, quiet, 2);
    only_reply(replayed.turn("c", client_hello(1), kNow));
    CHECK(replayed.scheduler().job_status(JobId(again))->cached == 1);
    const auto lines = results_of(replayed, again);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0]["cached_from"] == first + "#0");
  }
  ServerConfig upgraded = config;
  upgraded.runtime_version = "forktrial 99.0.0";
  const JobStatus other = submitted_once(upgraded, greeter.trial, 3, true);
  CHECK(other.cached == 0);
  CHECK(other.count(TrialStatus::reconciled) == 1);  // run, and reported
}

TEST_CASE("an entry dies with its source's fork, and an answer keeps its own copy",
          "[coordinator][core][cache]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const std::string first = submitted_once(config, greeter.trial, 0, true).id.str();
  const JobStatus answered_status = submitted_once(config, greeter.trial, 4, false);
  REQUIRE(answered_status.cached == 1);
  const std::string again = answered_status.id.str();
  const store::RunId source_fork = fork_run_of(TrialId{JobId(first), 0}, 1);
  {
    // What gc does to a fork its policy no longer keeps.
    store::EventStore store(greeter.store);
    const std::vector<store::RunId> collected{source_fork};
    REQUIRE(store.delete_runs(collected));
  }
  {
    store::EventStore store(greeter.store);
    CHECK(store.snapshot().run(fork_run_of(TrialId{JobId(again), 0}, 1)));
  }
  CoordinatorCore core(config, quiet, 1);
  only_reply(core.turn("c", client_hello(1), kNow));
  const auto answered = results_of(core, again);
  REQUIRE(answered.size() == 1);
  CHECK(answered[0]["cached_from"] == first + "#0");
  CHECK(answered[0]["fork_run_id"] == fork_run_of(TrialId{JobId(again), 0}, 1).str());
  // The source is gone: the trial runs, and its result is the entry now.
  const std::string third = submit_trials(core, 30, {greeter.trial});
  CHECK(core.scheduler().job_status(JobId(third))->cached == 0);
  CHECK(run_all(core, 40) == 1);
  const std::string fourth = submit_trials(core, 60, {greeter.trial});
  CHECK(results_of(core, fourth)[0]["cached_from"] == third + "#0");
}

namespace {

// Dates every blob of the store at `path` as stored on 2020-01-01, through
// the store's clock: old enough for any grace.
void date_blobs_2020(const std::filesystem::path& path) {
  store::StoreOptions options;
  options.clock = [] { return std::string("2020-01-01T00:00:00.000Z"); };
  store::EventStore events(path, options);
  std::vector<Digest> all;
  for (const store::BlobInfo& blob : events.snapshot().blobs()) all.push_back(blob.digest);
  REQUIRE(events.touch_blobs(all).empty());
}

// The digest of run_chat's segment up to `event`, as a submission stores it.
Digest chat_segment(const std::filesystem::path& path, const std::string& event) {
  store::EventStore events(path);
  auto snapshot = events.snapshot();
  const auto chat = snapshot.run(store::RunId("run_chat"));
  REQUIRE(chat);
  const auto at = snapshot.find_event(*chat, store::EventId(event));
  REQUIRE(at);
  const auto bytes = snapshot.segment(*chat, at->seq);
  Sha256 hasher;
  hasher.update(bytes.data(), bytes.size());
  return hasher.finish();
}

// The one queued trial, `job`'s, is leased, run and completes.
void runs_to_completion(CoordinatorCore& core, const std::string& job, std::uint64_t request) {
  CHECK(run_all(core, request) == 1);
  const auto lines = results_of(core, job);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["outcome"] == "completed");
}

std::set<Digest> stored_blobs(const std::filesystem::path& path) {
  store::EventStore events(path);
  std::set<Digest> digests;
  for (const store::BlobInfo& blob : events.snapshot().blobs()) digests.insert(blob.digest);
  return digests;
}

}  // namespace

TEST_CASE("gc collects the blobs only finished jobs need, and a later job uploads them again",
          "[coordinator][core][gc]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const auto archive =
      pack::archive_pack(std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "examples/packs/greeter");
  REQUIRE(archive);
  const Digest bundle = Sha256::of(archive->bytes);
  const std::string at_030 = changed(greeter.trial, "evt_031", "evt_030");
  std::string finished;
  std::string unfinished;
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    std::vector<std::pair<std::string, std::string>> acks;
    finished = three_reports_in_a_turn(core, greeter, acks);
    // Queued, never run: the bundle and the segment up to evt_030 stay.
    auto accepted = only_reply(core.turn("c", untokened_submission(20, at_030, 1), kNow));
    REQUIRE(accepted.envelope().isJobAccepted());
    unfinished = wire::text(accepted.envelope().getJobAccepted().getJob());
  }
  const Digest seg_031 = chat_segment(config.store, "evt_031");
  const Digest seg_030 = chat_segment(config.store, "evt_030");
  REQUIRE(stored_blobs(config.store) == std::set<Digest>{bundle, seg_031, seg_030});
  const std::string store = config.store.string();
  const auto gc = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"gc", "--store", store, "--keep", "all", "--json"});
    const auto result = forktrial::testing::run_forktrial(args);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return nlohmann::json::parse(result.out);
  };

  // Long unused, beside a client's fresh upload for a submission not yet made.
  date_blobs_2020(config.store);
  Digest upload;
  {
    store::EventStore events(config.store);
    upload = events.put_blob(std::as_bytes(std::span(std::string_view("a fresh upload"))));
  }
  const auto segment_size = [&](const Digest& digest) {
    store::EventStore events(config.store);
    return events.snapshot().blob(digest)->size();
  };
  const std::uint64_t freed = segment_size(seg_031);
  auto dry = gc({"--dry-run"});
  CHECK(dry["blobs_planned"] == 1);
  CHECK(dry["blob_bytes_planned"] == freed);
  CHECK(dry["blobs_deleted"] == 0);
  CHECK(stored_blobs(config.store) == std::set<Digest>{bundle, seg_031, seg_030, upload});

  auto collected = gc({});
  CHECK(collected["blobs_deleted"] == 1);
  CHECK(collected["blob_bytes_freed"] == freed);
  CHECK(collected["blobs_needed"] == 2);
  CHECK(collected["blobs_recent"] == 1);
  CHECK(stored_blobs(config.store) == std::set<Digest>{bundle, seg_030, upload});

  // Cancelled, the second job needs nothing: its bundle and segment go.
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(30), kNow));
    REQUIRE(only_reply(core.turn("c", cancel_request(31, unfinished), kNow)).envelope().which() !=
            Envelope::ERROR);
  }
  date_blobs_2020(config.store);
  auto second = gc({"--blob-grace", "30m"});
  CHECK(second["blobs_deleted"] == 3);
  CHECK(second["blobs_needed"] == 0);
  CHECK(stored_blobs(config.store).empty());

  // The same pack again: findMissing says it is missing, it is uploaded,
  // and the job runs.
  CoordinatorCore core(config, quiet, 7);
  only_reply(core.turn("c", client_hello(40), kNow));
  {
    capnp::MallocMessageBuilder message;
    auto digests = wire::start(message, 41).initFindMissing().initDigests(1);
    wire::set_digest(digests[0], bundle);
    auto missing = only_reply(core.turn("c", wire::encode(message), kNow));
    REQUIRE(missing.envelope().isMissing());
    REQUIRE(missing.envelope().getMissing().getDigests().size() == 1);
    CHECK(wire::digest_of(missing.envelope().getMissing().getDigests()[0]) == bundle);
  }
  {
    capnp::MallocMessageBuilder message(1 << 17);
    auto put = wire::start(message, 42).initPutBlob();
    wire::set_digest(put.initDigest(), bundle);
    put.setTotalSize(archive->bytes.size());
    put.setOffset(0);
    put.setBytes(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(archive->bytes.data()),
                                     archive->bytes.size()));
    REQUIRE(only_reply(core.turn("c", wire::encode(message), kNow)).envelope().which() !=
            Envelope::ERROR);
  }
  runs_to_completion(core, submit_trials(core, 43, {greeter.trial}, true), 50);
}

TEST_CASE("a blob a job names after gc's plan is kept by its apply, and the job runs",
          "[coordinator][core][gc]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  {
    // A blob no one names, and the bundle, both long unused.
    store::EventStore events(config.store);
    events.put_blob(std::as_bytes(std::span(std::string_view("unused"))));
  }
  date_blobs_2020(config.store);
  GcPlan plan;
  {
    store::EventStore events(config.store);
    auto planned = plan_gc(events.snapshot(), RetentionPolicy{KeepForks::all, Duration(0)}, kNow);
    REQUIRE(planned);
    plan = *planned;
  }
  REQUIRE(plan.blobs.size() == 2);
  CHECK(plan.blobs_needed == 0);

  // Between the plan and its apply, a client submits a job naming the bundle
  // it uploaded long ago (findMissing found it).
  std::string job;
  {
    CoordinatorCore core(config, quiet);
    only_reply(core.turn("c", client_hello(1), kNow));
    job = submit_trials(core, 2, {greeter.trial}, true);
  }
  {
    store::EventStore events(config.store);
    const auto deleted =
        apply_gc_blobs(events, plan.blobs, plan.blobs_stored_before, 1, [](std::uint64_t) {});
    CHECK(deleted.blobs == 1);
    CHECK(deleted.kept_recent == 1);
    CHECK(deleted.bytes == std::string_view("unused").size());
  }
  // The bundle stayed: the job is leased and runs.
  CoordinatorCore core(config, quiet);
  only_reply(core.turn("c", client_hello(10), kNow));
  runs_to_completion(core, job, 11);
}

TEST_CASE("a job in parts whose earlier part's segment gc took is refused, not recorded",
          "[coordinator][core][gc]") {
  GreeterStore greeter;
  ServerConfig config;
  config.store = greeter.store;
  const std::string at_030 = changed(greeter.trial, "evt_031", "evt_030");
  const Digest seg_030 = chat_segment(config.store, "evt_030");
  CoordinatorCore core(config, quiet);
  only_reply(core.turn("c", client_hello(1), kNow));
  // A queued job needs the bundle; the job in parts is not in the log yet.
  REQUIRE(only_reply(core.turn("c", untokened_submission(2, greeter.trial, 1), kNow))
              .envelope()
              .isJobAccepted());
  REQUIRE(only_reply(core.turn("c", part_frame(3, 0, 2, at_030, 1), kNow)).envelope().isOk());
  // gc, between the parts, without a grace: part 0's segment goes.
  const auto gc = forktrial::testing::run_forktrial(
      {"gc", "--store", config.store.string(), "--keep", "all", "--blob-grace", "0", "--json"});
  INFO(gc.err);
  REQUIRE(gc.exit_code == 0);
  CHECK(nlohmann::json::parse(gc.out)["blobs_deleted"] == 1);
  auto refused = only_reply(core.turn("c", part_frame(4, 1, 2, greeter.trial, 1), kNow));
  REQUIRE(refused.envelope().which() == Envelope::ERROR);
  CHECK_THAT(wire::text(refused.envelope().getError().getMessage()),
             Catch::Contains(seg_030.str()) && Catch::Contains("was collected by gc"));
  CHECK(core.scheduler().jobs().size() == 1);
}
