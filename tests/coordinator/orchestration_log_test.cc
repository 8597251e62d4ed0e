// The orchestration log: records to events and back, exactly; a log
// appended over many transactions and read back in order; one test per kind
// of damage to a record event; and a scheduler rebuilt from a real store.
#include "coordinator/orchestration_log.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/text.h"
#include "base/timestamp.h"
#include "coordinator/scheduler.h"
#include "store/event.h"
#include "store/event_store.h"
#include "tests/coordinator/scheduler_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::digest;
using testing::trial;

constexpr Attempt kMaxAttempt = std::numeric_limits<Attempt>::max();
constexpr std::uint32_t kMaxIndex = std::numeric_limits<std::uint32_t>::max();
const Instant kEpoch{Duration{0}};
const Instant kFarFuture = Instant::max();
const Instant kFarPast = Instant::min();

// Text that JSON must escape or cannot hold: quotes, backslashes, line
// breaks, NUL, a terminal escape, non-ASCII, and bytes that are not UTF-8
// (a stray byte, a UTF-16 surrogate, an overlong NUL, a cut sequence).
const std::vector<std::string> kAwkwardTexts = {
    "",
    "say \"hi\" \\ to\nthe\r\nworld\t!",
    std::string("nul\0inside", 10),
    "\x1b[2J\x7f",
    "café ✓ 日本 🎲 \u2028",
    "\xff\xfe not UTF-8",
    "\xed\xa0\x80",
    "\xc0\x80",
    "cut \xe2\x82",
};

// Records of every type, each at the edges of its fields.
std::vector<OrchestrationRecord> edge_records() {
  std::vector<OrchestrationRecord> records;
  records.push_back(JobSubmitted{JobId{"j"}, 0, "", {}, kEpoch});
  {
    JobSubmitted job{JobId{"job \"1\"\n"}, std::numeric_limits<int>::min(), "name", {}, kFarFuture};
    for (const std::string& text : kAwkwardTexts) {
      job.trials.push_back(TrialInput{text, digest(1), {}});
      job.trials.push_back(TrialInput{text, digest(2), {digest(3), digest(4), digest(3)}});
    }
    records.push_back(job);
  }
  records.push_back(
      JobSubmitted{JobId{"\xff"}, std::numeric_limits<int>::max(), "\xfe", {}, kFarPast});
  records.push_back(JobCancelled{JobId{"j"}, at(1)});
  records.push_back(WorkerJoined{WorkerId{"w"}, 0, 0, {}, kEpoch});
  records.push_back(WorkerJoined{WorkerId{"w ✓"},
                                 std::numeric_limits<std::uint32_t>::max(),
                                 7,
                                 {digest(1), digest(2)},
                                 kFarFuture,
                                 {pack::Executor::lua, pack::Executor::activegraph}});
  records.push_back(WorkerJoined{WorkerId{"py"}, 1, 0, {}, kEpoch, {pack::Executor::activegraph}});
  {
    TrialInput python{"p", digest(1), {digest(2)}};
    python.executor = pack::Executor::activegraph;
    records.push_back(JobSubmitted{JobId{"py"}, 0, "py", {python, TrialInput{}}, at(1)});
  }
  for (const KeepForks keep : {KeepForks::all, KeepForks::failures, KeepForks::none}) {
    JobSubmitted kept{JobId{"kept"}, 0, "kept", {TrialInput{}}, at(2)};
    kept.retention = RetentionPolicy{keep, Duration{keep == KeepForks::none ? 0 : 604'800'000}};
    records.push_back(kept);
  }
  records.push_back(LeasesRenewed{WorkerId{"w"}, {}, kEpoch, kEpoch});
  records.push_back(LeasesRenewed{WorkerId{"w"},
                                  {{trial("a", 0), 1}, {trial("b\n", kMaxIndex), kMaxAttempt}},
                                  kFarFuture,
                                  at(7)});
  records.push_back(
      TrialLeased{trial("a", kMaxIndex), kMaxAttempt, WorkerId{"w"}, kFarFuture, kFarPast});
  records.push_back(TrialReported{trial("a", 0), 0, WorkerId{""}, kEpoch});
  records.push_back(TrialAbandoned{trial("a", 1), 3, {}, at(2)});
  records.push_back(TrialAbandoned{trial("a", 1), kMaxAttempt, kAwkwardTexts, at(2)});
  for (const std::string& text : kAwkwardTexts) {
    records.push_back(WorkerLost{WorkerId{text}, text, at(3)});
    records.push_back(TrialRequeued{trial(text, 2), 1, text, at(4)});
    records.push_back(TrialFenced{trial("a", 3), 2, WorkerId{text}, text, at(5)});
  }
  for (const Outcome outcome : kOutcomes) {
    records.push_back(TrialReconciled{trial("a", 4), 1, outcome, at(6)});
  }
  for (const std::string& text : kAwkwardTexts) records.push_back(JobArchived{JobId{text}, at(7)});
  for (const Outcome outcome : kOutcomes) {
    records.push_back(TrialCached{trial("a", kMaxIndex), 1, trial("b\n", 0), outcome, at(8)});
  }
  records.push_back(TrialCached{trial("\xff", 0), kMaxAttempt, trial("", kMaxIndex),
                                Outcome::completed, kFarFuture});
  {
    TrialInput keyed{"k", digest(1), {digest(2)}};
    keyed.cache_key = digest(5);
    records.push_back(JobSubmitted{JobId{"keyed"}, 0, "keyed", {keyed, TrialInput{}}, at(1)});
  }
  // A snapshot's records.
  records.push_back(
      JobSummary{JobId{"s"}, 0, "", "", {}, false, 0, {}, {}, 0, 0, kEpoch, kEpoch, kEpoch});
  for (const std::string& text : kAwkwardTexts) {
    JobSummary summary{JobId{text},
                       std::numeric_limits<int>::min(),
                       text,
                       text,
                       RetentionPolicy{KeepForks::failures, Duration{86'400'000}},
                       true,
                       std::numeric_limits<std::uint64_t>::max(),
                       {1, 2, 3, 4, 5, std::numeric_limits<std::uint64_t>::max()},
                       {6, 7, 8, 9, 10},
                       11,
                       std::numeric_limits<std::uint64_t>::max(),
                       kFarPast,
                       kFarFuture,
                       at(8),
                       std::numeric_limits<std::uint64_t>::max()};
    records.push_back(summary);
    records.push_back(TrialRestored{trial(text, kMaxIndex), TrialStatus::abandoned, kMaxAttempt,
                                    kMaxAttempt, WorkerId{text}, kEpoch, kEpoch, kAwkwardTexts,
                                    std::nullopt, at(9)});
    records.push_back(JobRestored{JobId{text}, true, 1, 2, kFarFuture, at(10)});
  }
  for (std::size_t i = 0; i < kTrialStatusCount; ++i) {
    const auto status = static_cast<TrialStatus>(i);
    records.push_back(TrialRestored{
        trial("r", 1), status, 2, 1, std::nullopt, kFarPast, kFarFuture, {}, std::nullopt, kEpoch});
  }
  for (const Outcome outcome : kOutcomes) {
    records.push_back(TrialRestored{trial("r", 2),
                                    TrialStatus::reconciled,
                                    1,
                                    1,
                                    WorkerId{"w"},
                                    {},
                                    {},
                                    {"x"},
                                    outcome,
                                    at(11)});
  }
  records.push_back(JobRestored{JobId{"r"}, false, 0, 0, std::nullopt, kEpoch});
  return records;
}

// An event of `type` with `payload`, id evt_042.
store::NewEvent event_of(std::string type, std::string payload) {
  store::NewEvent event;
  event.id = store::EventId("evt_042");
  event.type = std::move(type);
  event.payload = std::move(payload);
  event.timestamp = "2026-02-03T04:05:06.789Z";
  return event;
}

// The error record_of gives for an event of `type` with `payload`.
std::string decode_error(std::string_view type, std::string payload) {
  const auto record = record_of(store::view_of(event_of(std::string(type), std::move(payload))));
  return record ? "decoded" : record.error().message;
}

store::StoreOptions quick_options() {
  store::StoreOptions options;
  options.sync = false;
  options.clock = [] { return std::string("2026-01-01T00:00:00.000Z"); };
  return options;
}

// One of the coordinator's own events, as it hands it to append_to_log
// (whose id it replaces).
store::NewEvent own_event(std::string type, std::string payload) {
  store::NewEvent event = event_of(std::move(type), std::move(payload));
  event.actor = "forktrial.coordinator";
  event.caused_by = store::EventId("evt_001");
  return event;
}

std::uint64_t append(store::EventStore& store, std::span<const OrchestrationRecord> records,
                     std::span<const store::NewEvent> extra = {}) {
  const auto head =
      store.write([&](store::Writer& writer) { return append_to_log(writer, records, extra); });
  if (!head) FAIL(head.error().message);
  return *head;
}

struct ReadBack {
  std::vector<OrchestrationRecord> records;
  std::vector<store::Event> others;
  // "r:<type>" or "o:<type>" for each event, in the order read.
  std::vector<std::string> order;
};

std::expected<ReadBack, std::string> read_all(const store::EventStore& store) {
  ReadBack read;
  const store::Snapshot snapshot = store.snapshot();
  const auto done = read_log(
      snapshot,
      [&](const OrchestrationRecord& record) {
        read.records.push_back(record);
        read.order.push_back("r:" + std::string(record_type(record)));
      },
      [&](const store::EventView& event) {
        read.others.push_back(event.to_event());
        read.order.push_back("o:" + std::string(event.type));
      });
  if (!done) return std::unexpected(done.error().message);
  return read;
}

TEST_CASE("every record type round-trips through its event exactly, edge values included",
          "[coordinator][orchestration_log]") {
  const std::vector<OrchestrationRecord> records = edge_records();
  std::set<std::string_view> types;
  for (const OrchestrationRecord& record : records) {
    types.insert(record_type(record));
    const store::NewEvent event = to_event(record, 12);
    INFO(record_type(record) << " " << event.payload.substr(0, 400));
    CHECK(event.type == record_type(record));
    CHECK(event.id.str() == "evt_012");
    CHECK(event.actor == std::string(kCoordinatorActor));
    // The store takes it as it is.
    CHECK(store::event_problem(event) == std::nullopt);
    const auto decoded = record_of(store::view_of(event));
    REQUIRE(decoded.has_value());
    CHECK(*decoded == record);
    // Equal records, equal bytes.
    CHECK(to_event(*decoded, 12) == event);
  }
  CHECK(types.size() == std::variant_size_v<OrchestrationRecord>);
}

TEST_CASE("a record event holds the record's fields as JSON, its time and the coordinator's name",
          "[coordinator][orchestration_log]") {
  const store::NewEvent leased =
      to_event(TrialLeased{trial("a", 3), 2, WorkerId{"w1"}, at(10'000), at(0)}, 7);
  CHECK(leased.id.str() == "evt_007");
  CHECK(leased.type == "trial.leased");
  CHECK(leased.payload ==
        R"({"trial":{"job":"a","index":3},"attempt":2,"worker":"w1","expires":1700000010000,)"
        R"("at":1700000000000})");
  CHECK(leased.timestamp == "2023-11-14T22:13:20.000Z");
  CHECK(leased.actor == "forktrial.coordinator");
  CHECK(leased.frame_id == std::nullopt);
  CHECK(leased.caused_by == std::nullopt);

  const store::NewEvent submitted = to_event(
      JobSubmitted{JobId{"j"}, -2, "n", {TrialInput{"p\"\n", digest(1), {digest(2)}}}, at(1)},
      1234);
  CHECK(submitted.id.str() == "evt_1234");
  CHECK(submitted.payload == R"({"job":"j","priority":-2,"name":"n","trials":[{"payload":"p\"\n",)"
                             R"("segment":")" +
                                 digest(1).str() + R"(","bundles":[")" + digest(2).str() +
                                 R"("]}],"at":1700000000001})");

  // A trial's run limit and a lease's deadline are written when there is
  // one, and read back; records without them read as before.
  {
    TrialInput limited{"p", digest(1), {}};
    limited.run_limit = Duration{10'000};
    const OrchestrationRecord job_record =
        JobSubmitted{JobId{"j"}, 0, "n", {limited, TrialInput{"q", digest(1), {}}}, at(1)};
    const store::NewEvent job_event = to_event(job_record, 1);
    CHECK_THAT(job_event.payload, Catch::Contains(R"("bundles":[],"run_ms":10000})") &&
                                      Catch::Contains(R"("payload":"q","segment":")"));
    CHECK(record_of(store::view_of(job_event)).value() == job_record);
    TrialLeased lease{trial("a", 3), 2, WorkerId{"w1"}, at(10'000), at(0)};
    lease.deadline = at(50'000);
    const store::NewEvent lease_event = to_event(lease, 1);
    CHECK_THAT(lease_event.payload, Catch::Contains(R"("deadline":1700000050000)"));
    CHECK(record_of(store::view_of(lease_event)).value() == OrchestrationRecord{lease});
  }

  // Text that is not UTF-8 is kept as its bytes in hex.
  CHECK(to_event(WorkerLost{WorkerId{"w\xff"}, "ok", at(0)}, 1).payload ==
        R"({"worker":{"hex":"77ff"},"reason":"ok","at":1700000000000})");
  CHECK(to_event(TrialReconciled{trial("a", 0), 1, Outcome::limits_exceeded, at(0)}, 1).payload ==
        R"({"trial":{"job":"a","index":0},"attempt":1,"outcome":"limits_exceeded",)"
        R"("at":1700000000000})");

  // The timestamp shows what ISO-8601 can; the payload keeps the instant.
  CHECK(to_event(JobCancelled{JobId{"j"}, kEpoch}, 1).timestamp == "1970-01-01T00:00:00.000Z");
  CHECK(to_event(JobCancelled{JobId{"j"}, kFarFuture}, 1).timestamp == "9999-12-31T23:59:59.999Z");
  CHECK(to_event(JobCancelled{JobId{"j"}, kFarPast}, 1).timestamp == "0001-01-01T00:00:00.000Z");
  CHECK(to_event(JobCancelled{JobId{"j"}, kFarFuture}, 1).payload ==
        R"({"job":"j","at":9223372036854775807})");
  for (const OrchestrationRecord& record : edge_records()) {
    CHECK(parse_timestamp(to_event(record, 1).timestamp).has_value());
  }
}

TEST_CASE("a worker.joined record written before prefetch existed reads as no prefetch",
          "[coordinator][orchestration_log]") {
  const auto record = record_of(
      store::view_of(event_of("worker.joined", R"({"worker":"w","slots":3,"cached":[],"at":5})")));
  REQUIRE(record);
  const auto& joined = std::get<WorkerJoined>(*record);
  CHECK(joined.slots == 3);
  CHECK(joined.prefetch == 0);
  CHECK(decode_error("worker.joined",
                     R"({"worker":"w","slots":3,"prefetch":-1,"cached":[],"at":5})") ==
        "event evt_042 (worker.joined): field \"prefetch\" is -1, not an integer in 0..4294967295");
}

TEST_CASE("records written before executors were told apart read as Lua's",
          "[coordinator][orchestration_log][executor]") {
  const auto joined = record_of(
      store::view_of(event_of("worker.joined", R"({"worker":"w","slots":3,"cached":[],"at":5})")));
  REQUIRE(joined);
  CHECK(std::get<WorkerJoined>(*joined).executors == std::vector{pack::Executor::lua});
  const std::string trial = R"({"payload":"p","segment":")" + digest(1).str() + R"(","bundles":[])";
  const auto submitted = record_of(
      store::view_of(event_of("job.submitted", R"({"job":"j","priority":0,"name":"n","trials":[)" +
                                                   trial + R"(}],"at":1})")));
  REQUIRE(submitted);
  CHECK(std::get<JobSubmitted>(*submitted).trials.at(0).executor == pack::Executor::lua);
  // A Lua trial is written as before; an activegraph one names its executor.
  TrialInput python{"p", digest(1), {}};
  python.executor = pack::Executor::activegraph;
  CHECK_THAT(to_event(JobSubmitted{JobId{"j"}, 0, "n", {python}, at(1)}, 1).payload,
             Catch::Contains(R"("bundles":[],"executor":"activegraph"})"));
  CHECK(decode_error("worker.joined",
                     R"({"worker":"w","slots":3,"cached":[],"executors":["cobol"],"at":5})") ==
        "event evt_042 (worker.joined): field \"executors[0]\" \"cobol\" is not an executor");
}

TEST_CASE("the record types are told from the coordinator's other events",
          "[coordinator][orchestration_log]") {
  for (const std::string_view type :
       {"job.submitted", "job.cancelled", "worker.joined", "worker.lost", "worker.heartbeat",
        "trial.leased", "trial.requeued", "trial.abandoned", "trial.reported", "trial.fenced",
        "trial.reconciled"}) {
    CHECK(is_record_type(type));
  }
  for (const std::string_view type : {"trial.result", "", "trial.leased ", "Trial.leased", "job"}) {
    CHECK_FALSE(is_record_type(type));
  }
  CHECK(decode_error("trial.result", "{}") ==
        "event evt_042 (trial.result): not an orchestration record type");
}

TEST_CASE("a damaged record event is an error naming the event and the field",
          "[coordinator][orchestration_log]") {
  const std::string d = digest(1).str();
  const auto leased = [](const std::string& fields) {
    return decode_error("trial.leased", "{" + fields + "}");
  };
  const std::string trial_ok = R"("trial":{"job":"a","index":3},)";
  const std::string rest = R"("worker":"w1","expires":5,"at":1)";

  SECTION("payload that is not JSON") {
    const std::string error = decode_error("trial.leased", R"({"trial": )");
    CHECK(error.starts_with("event evt_042 (trial.leased): payload is not JSON: "));
    CHECK(error.find("parse error") != std::string::npos);
  }
  SECTION("payload that is not an object") {
    CHECK(decode_error("job.cancelled", R"(["j", 1])") ==
          "event evt_042 (job.cancelled): payload is an array, not an object");
  }
  SECTION("a missing field") {
    CHECK(leased(trial_ok + R"("attempt":1,"worker":"w1","at":1)") ==
          "event evt_042 (trial.leased): field \"expires\" is missing");
    CHECK(leased(R"("trial":{"job":"a"},"attempt":1,)" + rest) ==
          "event evt_042 (trial.leased): field \"trial.index\" is missing");
  }
  SECTION("a field this build does not write") {
    CHECK(leased(trial_ok + R"("attempt":1,"lease":9,)" + rest) ==
          "event evt_042 (trial.leased): field \"lease\" is not a field of this record");
    CHECK(leased(R"("trial":{"job":"a","index":3,"x":0},"attempt":1,)" + rest) ==
          "event evt_042 (trial.leased): field \"trial.x\" is not a field of this record");
  }
  SECTION("a retention this build does not know") {
    CHECK(decode_error("job.submitted",
                       R"({"job":"j","priority":0,"name":"n","trials":[],"keep_forks":"most",)"
                       R"("keep_forks_after":0,"at":1})") ==
          "event evt_042 (job.submitted): field \"keep_forks\" \"most\" is not a retention (all, "
          "failures, none)");
  }
  SECTION("a field of the wrong type") {
    CHECK(leased(trial_ok + R"("attempt":"1",)" + rest) ==
          "event evt_042 (trial.leased): field \"attempt\" is a string, not an integer in "
          "0..4294967295");
    CHECK(leased(R"("trial":"a#3","attempt":1,)" + rest) ==
          "event evt_042 (trial.leased): field \"trial\" is a string, not an object");
    CHECK(leased(trial_ok + R"("attempt":1,"worker":7,"expires":5,"at":1)") ==
          "event evt_042 (trial.leased): field \"worker\" is a number, not a string");
    CHECK(leased(trial_ok + R"("attempt":1,"worker":"w1","expires":1.5,"at":1)") ==
          "event evt_042 (trial.leased): field \"expires\" is 1.5, not an integer in "
          "-9223372036854775808..9223372036854775807");
    CHECK(decode_error("worker.joined", R"({"worker":"w","slots":1,"cached":{},"at":1})") ==
          "event evt_042 (worker.joined): field \"cached\" is an object, not an array");
  }
  SECTION("a number out of the field's range") {
    CHECK(leased(trial_ok + R"("attempt":-1,)" + rest) ==
          "event evt_042 (trial.leased): field \"attempt\" is -1, not an integer in 0..4294967295");
    CHECK(leased(trial_ok + R"("attempt":4294967296,)" + rest) ==
          "event evt_042 (trial.leased): field \"attempt\" is 4294967296, not an integer in "
          "0..4294967295");
    CHECK(leased(trial_ok + R"("attempt":1,"worker":"w1","expires":9223372036854775808,"at":1)") ==
          "event evt_042 (trial.leased): field \"expires\" is 9223372036854775808, not an integer "
          "in -9223372036854775808..9223372036854775807");
    CHECK(decode_error("job.submitted",
                       R"({"job":"j","priority":2147483648,"name":"","trials":[],"at":1})") ==
          "event evt_042 (job.submitted): field \"priority\" is 2147483648, not an integer in "
          "-2147483648..2147483647");
  }
  SECTION("a digest that is not one") {
    const std::string error =
        decode_error("job.submitted",
                     R"({"job":"j","priority":0,"name":"","trials":[{"payload":"p","segment":")" +
                         d + R"(","bundles":[")" + d + R"(","sha256:abc"]}],"at":1})");
    CHECK(
        error.starts_with("event evt_042 (job.submitted): field \"trials[0].bundles[1]\" "
                          "\"sha256:abc\" is not a digest: "));
    CHECK(decode_error("worker.joined", R"({"worker":"w","slots":1,"cached":[5],"at":1})") ==
          "event evt_042 (worker.joined): field \"cached[0]\" is a number, not a digest string");
  }
  SECTION("a snapshot's record with a status, a flag or counts that are not one") {
    CHECK(decode_error("trial.restored",
                       R"({"trial":{"job":"a","index":0},"status":"lost","attempt":1,)"
                       R"("leased_attempt":0,"at":1})") ==
          "event evt_042 (trial.restored): field \"status\" \"lost\" is not a trial status");
    CHECK(decode_error("job.restored", R"({"job":"a","cancelled":1,"failed_attempts":0,)"
                                       R"("fenced_reports":0,"at":1})") ==
          "event evt_042 (job.restored): field \"cancelled\" is a number, not true or false");
    const std::string summary =
        R"({"job":"a","priority":0,"name":"","cancelled":false,"trials":1,)"
        R"("counts":[0,0,0,1,0,0],"outcomes":[1,0,0,0,0],"failed_attempts":0,)"
        R"("fenced_reports":0,"submitted_at":1,"finished_at":2,"at":3})";
    CHECK(decode_error("job.summary", summary) == "decoded");
    std::string short_counts = summary;
    short_counts.replace(short_counts.find("[0,0,0,1,0,0]"), 13, "[0,0,0,1,0]");
    CHECK(decode_error("job.summary", short_counts) ==
          "event evt_042 (job.summary): field \"counts\" holds 5 counts, not 6");
    std::string negative = summary;
    negative.replace(negative.find("[1,0,0,0,0]"), 11, "[-1,0,0,0,0]");
    CHECK(decode_error("job.summary", negative) ==
          "event evt_042 (job.summary): field \"outcomes[0]\" is -1, not an integer in "
          "0..2^64-1");
  }
  SECTION("an outcome name that is not one") {
    CHECK(decode_error("trial.reconciled",
                       R"({"trial":{"job":"a","index":0},"attempt":1,"outcome":"won","at":1})") ==
          "event evt_042 (trial.reconciled): field \"outcome\" \"won\" is not an outcome name");
  }
  SECTION("hex text that is not hex") {
    CHECK(decode_error("worker.lost", R"({"worker":{"hex":"7"},"reason":"","at":1})") ==
          "event evt_042 (worker.lost): field \"worker.hex\" is not an even number of lowercase "
          "hex digits");
    CHECK(decode_error("worker.lost", R"({"worker":{"hex":"FF"},"reason":"","at":1})") ==
          "event evt_042 (worker.lost): field \"worker.hex\" is not an even number of lowercase "
          "hex digits");
    CHECK(decode_error("trial.abandoned",
                       R"({"trial":{"job":"a","index":0},"attempt":1,"reasons":["x",{"hx":"00"}],)"
                       R"("at":1})") ==
          "event evt_042 (trial.abandoned): field \"reasons[1].hex\" is missing");
  }
  SECTION("an event id or type that cannot be shown as it is") {
    store::NewEvent event;
    event.id = store::EventId("evt\x1b[2J");
    event.type = "trial.leased";
    event.payload = "[]";
    CHECK(record_of(store::view_of(event)).error().message ==
          "event evt\\x1b[2J (trial.leased): payload is an array, not an object");
  }
}

TEST_CASE("a log appended over several transactions reads back in order, other events apart",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());

  // No log yet: nothing to read.
  const auto empty = read_all(store);
  REQUIRE(empty.has_value());
  CHECK(empty->order.empty());

  const std::vector<OrchestrationRecord> first = {
      JobSubmitted{JobId{"a"}, 1, "job a", {testing::trial_input(1)}, at(0)},
      WorkerJoined{WorkerId{"w1"}, 2, 1, {digest(1)}, at(1)},
  };
  CHECK(append(store, first) == 2);
  const std::vector<OrchestrationRecord> second = {
      TrialLeased{trial("a", 0), 1, WorkerId{"w1"}, at(10'000), at(2)},
      TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(3)},
      TrialReconciled{trial("a", 0), 1, Outcome::scenario_failed, at(4)},
  };
  const std::vector<store::NewEvent> result = {own_event("trial.result", R"({"ok":false})"),
                                               own_event("trial.note", R"({"n":1})")};
  CHECK(append(store, second, result) == 7);
  // Only the caller's own events, and nothing at all.
  const std::vector<store::NewEvent> note = {own_event("trial.note", R"({"n":2})")};
  CHECK(append(store, {}, note) == 8);
  CHECK(append(store, {}) == 8);
  const std::vector<OrchestrationRecord> third = {JobCancelled{JobId{"a"}, at(5)}};
  CHECK(append(store, third) == 9);

  const store::Snapshot snapshot = store.snapshot();
  const std::optional<store::RunInfo> run = snapshot.run(kOrchestrationRun);
  REQUIRE(run);
  CHECK(run->label == "orchestration log");
  std::vector<std::string> ids;
  for (const store::Event& event : snapshot.history(*run)) ids.push_back(event.id.str());
  CHECK(ids == std::vector<std::string>{"evt_001", "evt_002", "evt_003", "evt_004", "evt_005",
                                        "evt_006", "evt_007", "evt_008", "evt_009"});

  const auto read = read_all(store);
  REQUIRE(read.has_value());
  CHECK(read->order == std::vector<std::string>{"r:job.submitted", "r:worker.joined",
                                                "r:trial.leased", "r:trial.reported",
                                                "r:trial.reconciled", "o:trial.result",
                                                "o:trial.note", "o:trial.note", "r:job.cancelled"});
  std::vector<OrchestrationRecord> expected = first;
  expected.insert(expected.end(), second.begin(), second.end());
  expected.insert(expected.end(), third.begin(), third.end());
  CHECK(read->records == expected);

  // The caller's events keep everything but their id.
  REQUIRE(read->others.size() == 3);
  store::NewEvent kept = result[0];
  kept.id = store::EventId("evt_006");
  CHECK(static_cast<const store::NewEvent&>(read->others[0]) == kept);
  CHECK(read->others[0].seq == 6);
  CHECK(read->others[2].id.str() == "evt_008");
  CHECK(read->others[2].payload == R"({"n":2})");
}

TEST_CASE("a worker's leases of one offer are one event, read back as the records they were",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  const auto lease = [](std::uint32_t index, const char* worker, std::int64_t expires,
                        std::int64_t when, std::int64_t deadline = 0) {
    TrialLeased leased{trial("a", index), index + 1, WorkerId{worker}, at(expires), at(when)};
    if (deadline != 0) leased.deadline = at(deadline);
    return leased;
  };
  const std::vector<OrchestrationRecord> records = {
      lease(0, "w1", 30'000, 1),          // one offer of w1: one event
      lease(1, "w1", 30'000, 1, 90'000),  //   (each with its attempt and deadline)
      lease(2, "w1", 30'000, 1),          //
      lease(3, "w2", 30'000, 1),          // another worker's: alone, a trial.leased
      TrialReported{trial("a", 0), 1, WorkerId{"w1"}, at(2)},
      lease(4, "w1", 31'000, 2),  // two leases of a later offer
      lease(5, "w1", 31'000, 2),
      lease(6, "w1", 31'000, 3),  // another time: a trial.leased of its own
  };
  CHECK(append(store, records) == 5);
  const auto read = read_all(store);
  REQUIRE(read.has_value());
  CHECK(read->records == records);
  std::vector<std::string> types;
  const store::Snapshot snapshot = store.snapshot();
  for (const store::Event& event : snapshot.history(*snapshot.run(kOrchestrationRun))) {
    types.push_back(event.type);
  }
  CHECK(types == std::vector<std::string>{"trials.leased", "trial.leased", "trial.reported",
                                          "trials.leased", "trial.leased"});
  CHECK(decode_error("trials.leased", "{}") ==
        "event evt_042 (trials.leased): holds several trial.leased records, read one by one "
        "(read_log)");
}

TEST_CASE("leases and settlements written as text hold any id, and read back as written",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  std::vector<OrchestrationRecord> written;
  // Ids are a peer's text: quotes, backslashes, control characters, other
  // scripts, and bytes that are not UTF-8 (written in hex).
  for (const std::string& id :
       {std::string("w\"1\\"), std::string("w\n\t\x01\x1f\x7f"),
        std::string("caf\xc3\xa9 \xe2\x80\x8b"), std::string("bad\xff"), std::string("")}) {
    const WorkerId worker{id};
    const TrialId leased{JobId{id}, 7};
    const std::vector<OrchestrationRecord> records = {
        TrialLeased{leased, 1, worker, at(30'000), at(1), at(90'000)},
        TrialLeased{trial("a", 8), 2, worker, at(30'000), at(1)},
        TrialReported{leased, 1, worker, at(2)},
        TrialReconciled{leased, 1, Outcome::completed, at(3)},
    };
    std::vector<Verdict> verdicts = {{leased, 1, worker, R"({"events_appended":1})"}};
    const auto head = store.write([&](store::Writer& writer) {
      return append_to_log(writer, records, {}, kJobChunkBytes, verdicts);
    });
    REQUIRE(head.has_value());
    written.insert(written.end(), records.begin(), records.end());
    // The same text the JSON library gives for the same fields.
    const store::Snapshot snapshot = store.snapshot();
    const auto history = snapshot.history(*snapshot.run(kOrchestrationRun));
    const auto text = [](const std::string& value) {
      if (forktrial::is_valid_utf8(value)) return nlohmann::ordered_json(value);
      std::string hex;
      for (const unsigned char byte : value) {
        hex += "0123456789abcdef"[byte >> 4];
        hex += "0123456789abcdef"[byte & 0xF];
      }
      return nlohmann::ordered_json{{"hex", hex}};
    };
    nlohmann::ordered_json leases = {
        {"worker", text(id)},
        {"expires", 1'700'000'030'000},
        {"trials",
         {{{"job", text(id)}, {"index", 7}, {"attempt", 1}, {"deadline", 1'700'000'090'000}},
          {{"job", "a"}, {"index", 8}, {"attempt", 2}}}},
        {"at", 1'700'000'000'001}};
    CHECK(history[history.size() - 2].payload == leases.dump());
    nlohmann::ordered_json settled = {{"trial", {{"job", text(id)}, {"index", 7}}},
                                      {"attempt", 1},
                                      {"worker", text(id)},
                                      {"reported_at", 1'700'000'000'002},
                                      {"outcome", "completed"},
                                      {"verdict", {{"events_appended", 1}}},
                                      {"at", 1'700'000'000'003}};
    CHECK(history.back().payload == settled.dump());
  }
  const auto read = read_all(store);
  REQUIRE(read.has_value());
  CHECK(read->records == written);
}

TEST_CASE("a reconciled attempt is one trial.settled event, its report folded in where it may",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  const WorkerId w1{"w1"};
  const WorkerId w2{"w2"};
  const TrialReported a{trial("a", 0), 1, w1, at(1)};
  const TrialReported c{trial("a", 2), 1, w2, at(1)};
  const TrialReported f{trial("f", 0), 2, w1, at(1)};
  const TrialReported g{trial("a", 6), 1, w1, at(1)};
  const std::vector<OrchestrationRecord> records = {
      a,
      TrialLeased{trial("a", 1), 1, w1, at(30'000), at(1)},  // w1's other lease: no matter
      c,
      TrialRequeued{trial("a", 5), 1, "lapsed", at(1)},  // another trial's end: no matter
      WorkerLost{w2, "gone", at(2)},                     // c's worker lost: c is not folded
      f,
      JobCancelled{JobId{"f"}, at(2)},  // f's job cancelled: f is not folded
      TrialReconciled{a.trial, 1, Outcome::completed, at(3)},
      TrialReconciled{c.trial, 1, Outcome::crashed, at(3)},
      TrialReconciled{trial("a", 3), 2, Outcome::completed, at(3)},  // reported before
      TrialReconciled{f.trial, 2, Outcome::scenario_failed, at(3)},
      TrialReconciled{trial("a", 4), 1, Outcome::completed, at(3)},  // no verdict
      g,
      TrialReconciled{g.trial, 1, Outcome::completed, at(4)},
  };
  std::vector<Verdict> verdicts = {
      {trial("a", 3), 2, w1, R"({"n":3})"}, {a.trial, 1, w1, R"({"n":0})"},
      {c.trial, 1, w2, R"({"n":2})"},       {f.trial, 2, w1, R"({"n":"f"})"},
      {g.trial, 1, w2, R"({"n":6})"},  // another worker than g's report: not folded
  };
  const auto head = store.write([&](store::Writer& writer) {
    return append_to_log(writer, records, {}, kJobChunkBytes, verdicts);
  });
  REQUIRE(head.has_value());
  std::vector<std::string> types;
  const store::Snapshot snapshot = store.snapshot();
  const auto history = snapshot.history(*snapshot.run(kOrchestrationRun));
  for (const store::Event& event : history) types.push_back(event.type);
  CHECK(types == std::vector<std::string>{"trial.leased", "trial.reported", "trial.requeued",
                                          "worker.lost", "trial.reported", "job.cancelled",
                                          "trial.settled", "trial.settled", "trial.settled",
                                          "trial.settled", "trial.reconciled", "trial.reported",
                                          "trial.settled"});
  CHECK(*head == 13);
  // Each verdict knows its event.
  CHECK(verdicts[1].seq == 7);
  CHECK(verdicts[2].seq == 8);
  CHECK(verdicts[0].seq == 9);
  CHECK(verdicts[3].seq == 10);
  CHECK(verdicts[4].seq == 13);
  CHECK(history[6].payload ==
        R"({"trial":{"job":"a","index":0},"attempt":1,"worker":"w1","reported_at":1700000000001,)"
        R"("outcome":"completed","verdict":{"n":0},"at":1700000000003})");
  CHECK(history[7].payload ==
        R"({"trial":{"job":"a","index":2},"attempt":1,"worker":"w2","outcome":"crashed",)"
        R"("verdict":{"n":2},"at":1700000000003})");
  // Read back: the same records, a folded report just before its
  // reconciliation; then each trial.settled for its verdict.
  const auto read = read_all(store);
  REQUIRE(read.has_value());
  std::vector<OrchestrationRecord> expected = records;
  expected.erase(expected.begin());  // a, folded
  expected.insert(expected.begin() + 6, a);
  CHECK(read->records == expected);
  CHECK(std::count(read->order.begin(), read->order.end(), "o:trial.settled") == 5);
  CHECK(read->order[6] == "r:trial.reported");
  CHECK(read->order[7] == "r:trial.reconciled");
  CHECK(read->order[8] == "o:trial.settled");
  CHECK(decode_error("trial.settled", "{}") ==
        "event evt_042 (trial.settled): holds a trial.reconciled record and its verdict, read by "
        "read_log");
}

TEST_CASE("a damaged trial.settled event makes the log corrupt, naming the field",
          "[coordinator][orchestration_log]") {
  const auto corrupt = [](const std::string& payload) {
    forktrial::testing::TempDir dir;
    store::EventStore store(dir.path() / "store", quick_options());
    const std::vector<store::NewEvent> bad = {own_event("trial.settled", payload)};
    REQUIRE(append(store, {}, bad) == 1);
    const auto read = read_all(store);
    REQUIRE_FALSE(read.has_value());
    return read.error();
  };
  const std::string trial = R"({"trial":{"job":"a","index":0},"attempt":1,"worker":"w",)";
  CHECK_THAT(corrupt(trial + R"("outcome":"completed","at":1})"),
             Catch::Contains("event evt_001 (trial.settled): field \"verdict\" is missing"));
  CHECK_THAT(corrupt(trial + R"("outcome":"completed","verdict":[],"at":1})"),
             Catch::Contains("field \"verdict\" is an array, not an object"));
  CHECK_THAT(corrupt(trial + R"("reported_at":"soon","outcome":"completed","verdict":{},"at":1})"),
             Catch::Contains("field \"reported_at\""));
  CHECK_THAT(corrupt(trial + R"("outcome":"won","verdict":{},"at":1})"),
             Catch::Contains("field \"outcome\" \"won\" is not an outcome name"));
  CHECK_THAT(corrupt(trial + R"("outcome":"completed","verdict":{},"at":1,"extra":0})"),
             Catch::Contains("field \"extra\" is not a field of this record"));
}

TEST_CASE("an archived trial round-trips through its event, and is read by its index",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  std::vector<ArchivedTrial> trials;
  for (std::uint32_t i = 0; i < kAwkwardTexts.size(); ++i) {
    ArchivedTrial& t = trials.emplace_back();
    t.index = i;
    t.attempt = i + 1;
    t.input = TrialInput{kAwkwardTexts[i], digest(1), {digest(2), digest(3)}};
    switch (i % 3) {
      case 0:
        t.status = TrialStatus::reconciled;
        t.outcome = kOutcomes[i % kOutcomes.size()];
        t.worker = WorkerId{kAwkwardTexts[i]};
        t.result = R"({"events_appended":2,"detail":"d"})";
        break;
      case 1:
        t.status = TrialStatus::abandoned;
        t.reasons = {kAwkwardTexts[i], "lapsed"};
        t.input.run_limit = Duration{5'000};
        t.input.executor = pack::Executor::activegraph;
        break;
      default:
        t.status = TrialStatus::reconciled;
        t.outcome = Outcome::completed;
        t.result = R"({"trial":"j#2","outcome":"completed"})";
        t.line = true;
        // A repeat of the trial two before: its input is that one's.
        t.input_of = i - 2;
        t.input = trials[i - 2].input;
        break;
    }
  }
  std::vector<store::NewEvent> events;
  for (const ArchivedTrial& t : trials) {
    events.push_back(archived_trial_event(t, at(9)));
    CHECK(store::event_problem(events.back()) == std::nullopt);
    const auto decoded = archived_trial_of(store::view_of(events.back()));
    REQUIRE(decoded.has_value());
    ArchivedTrial as_written = t;
    if (t.input_of) {
      as_written.input = TrialInput{};  // the event names the trial holding it
      CHECK_THAT(events.back().payload, !Catch::Contains("\"input\""));
    }
    CHECK(*decoded == as_written);
  }
  const JobId job{"job_1"};
  REQUIRE(store.import_run({.id = archive_run_of(job), .label = "archive"}, events).has_value());
  CHECK(archive_run_of(job).str() == "forktrial.archive.job_1");
  const auto snapshot = store.snapshot();
  for (const std::uint32_t index : {4U, 5U}) {  // 5 names 3's input
    const auto read = read_archived_trial(snapshot, TrialId{job, index});
    REQUIRE(read.has_value());
    REQUIRE(read->has_value());
    CHECK(**read == trials[index]);
  }
  const auto beyond = read_archived_trial(snapshot, TrialId{job, 99});
  REQUIRE(beyond.has_value());
  CHECK_FALSE(beyond->has_value());
  const auto elsewhere = read_archived_trial(snapshot, TrialId{JobId{"other"}, 0});
  REQUIRE(elsewhere.has_value());
  CHECK_FALSE(elsewhere->has_value());
  std::vector<ArchivedTrial> visited;
  REQUIRE(visit_archive(snapshot, job, [&](ArchivedTrial&& t) { visited.push_back(t); }));
  CHECK(visited == trials);
}

TEST_CASE("a damaged archived trial is an error naming the event and the field",
          "[coordinator][orchestration_log]") {
  const auto error = [](const std::string& payload) {
    const auto decoded = archived_trial_of(store::view_of(event_of("trial.archived", payload)));
    return decoded ? std::string("decoded") : decoded.error().message;
  };
  const std::string input =
      R"("input":{"payload":"p","segment":"sha256:)" + std::string(64, 'a') + R"(","bundles":[]})";
  CHECK(error(R"({"index":0,"status":"abandoned","attempt":3,)" + input + "}") == "decoded");
  CHECK(error(R"({"index":0,"status":"queued","attempt":1,)" + input + "}") ==
        "event evt_042 (trial.archived): field \"status\" \"queued\" is not a final status");
  CHECK(error(R"({"index":0,"status":"reconciled","attempt":1,)" + input + "}") ==
        "event evt_042 (trial.archived): field \"outcome\" is missing for a reconciled trial");
  CHECK(
      error(R"({"index":0,"status":"cancelled","attempt":1,"outcome":"crashed",)" + input + "}") ==
      "event evt_042 (trial.archived): field \"outcome\" is given for a trial that was not "
      "reconciled");
  CHECK_THAT(error(R"({"index":0,"status":"abandoned","attempt":1})"),
             Catch::Contains("field \"input\" is missing"));
  CHECK_THAT(error(R"({"index":0,"status":"abandoned","attempt":1,"input":{"payload":"p"}})"),
             Catch::Contains("field \"input.segment\" is missing"));
  CHECK_THAT(error(R"({"index":0,"status":"abandoned","attempt":1,"verdict":3,)" + input + "}"),
             Catch::Contains("field \"verdict\" is a number, not an object"));
  CHECK_THAT(error(R"({"index":0,"status":"abandoned","attempt":1,"x":1,)" + input + "}"),
             Catch::Contains("field \"x\" is not a field of this record"));
  CHECK(error(R"({"index":3,"status":"abandoned","attempt":1,"input_of":3})") ==
        "event evt_042 (trial.archived): field \"input_of\" is 3, not the index of an earlier "
        "trial");
  const auto wrong_type = archived_trial_of(store::view_of(event_of("trial.settled", "{}")));
  REQUIRE_FALSE(wrong_type.has_value());
  CHECK(wrong_type.error().message == "event evt_042 (trial.settled): not a trial.archived event");
}

TEST_CASE("a damaged trials.leased event makes the log corrupt, naming the field",
          "[coordinator][orchestration_log]") {
  const auto corrupt = [](const std::string& payload) {
    forktrial::testing::TempDir dir;
    store::EventStore store(dir.path() / "store", quick_options());
    const std::vector<store::NewEvent> bad = {own_event("trials.leased", payload)};
    REQUIRE(append(store, {}, bad) == 1);
    const auto read = read_all(store);
    REQUIRE_FALSE(read.has_value());
    return read.error();
  };
  CHECK_THAT(corrupt(R"({"worker":"w1","expires":5,"trials":[],"at":1})"),
             Catch::Contains("event evt_001 (trials.leased): field \"trials\" is empty"));
  CHECK_THAT(
      corrupt(R"({"worker":"w1","expires":5,"trials":[{"job":"a","index":0}],"at":1})"),
      Catch::Contains("event evt_001 (trials.leased): field \"trials[0].attempt\" is missing"));
  CHECK_THAT(corrupt(R"({"worker":"w1","expires":5,"trials":[{"job":"a","index":0,"attempt":1,)"
                     R"("lease":2}],"at":1})"),
             Catch::Contains("field \"trials[0].lease\" is not a field of this record"));
}

TEST_CASE("an event the store refuses appends nothing to the log",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  const std::vector<OrchestrationRecord> records = {JobCancelled{JobId{"a"}, at(0)}};
  CHECK(append(store, records) == 1);
  const std::vector<store::NewEvent> bad = {own_event("trial\nresult", "{}")};
  const auto refused =
      store.write([&](store::Writer& writer) { return append_to_log(writer, records, bad); });
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == store::Refused::invalid_event);
  CHECK(store.snapshot().run(kOrchestrationRun)->head == 1);
}

TEST_CASE("records that do not apply are set aside, the log read again without each",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  // As two coordinators would write one log: the same worker joining twice,
  // and a cancel of a job this log never had.
  const std::vector<OrchestrationRecord> records = {
      WorkerJoined{WorkerId{"w1"}, 1, 0, {}, at(0)}, WorkerJoined{WorkerId{"w1"}, 1, 0, {}, at(1)},
      WorkerJoined{WorkerId{"w2"}, 1, 0, {}, at(2)}, JobCancelled{JobId{"job_other"}, at(3)}};
  CHECK(append(store, records) == 4);
  Scheduler scheduler;
  int restarts = 0;
  auto replayed = replay_setting_aside(
      store.snapshot(),
      [&] {
        ++restarts;
        scheduler = Scheduler();
      },
      [&](OrchestrationRecord&& record) { scheduler.replay(std::move(record)); },
      [](const store::EventView&) {});
  REQUIRE(replayed);
  CHECK(restarts == 3);  // the first read, and one for each record set aside
  CHECK(replayed->records == 2);
  REQUIRE(replayed->set_aside.size() == 2);
  CHECK(replayed->set_aside[0].ordinal == 1);
  CHECK(replayed->set_aside[0].type == "worker.joined");
  CHECK(replayed->set_aside[0].why == "worker w1 is alive");
  CHECK(describe(replayed->set_aside[1]) == "record 3 (job.cancelled): no job job_other");
  CHECK(scheduler.workers().size() == 2);
  // Past the most it sets aside, the log is beyond it, and says which.
  auto beyond = replay_setting_aside(
      store.snapshot(), [&] { scheduler = Scheduler(); },
      [&](OrchestrationRecord&& record) { scheduler.replay(std::move(record)); },
      [](const store::EventView&) {}, 1);
  REQUIRE_FALSE(beyond);
  CHECK(beyond.error().code == ErrorCode::failed_precondition);
  CHECK_THAT(beyond.error().message,
             Catch::Contains("more than 1 records of the orchestration log do not apply") &&
                 Catch::Contains("record 1 (worker.joined)") &&
                 Catch::Contains("and record 3 (job.cancelled)"));
}

TEST_CASE("a log holding a damaged record is reported corrupt at that record",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  const std::vector<OrchestrationRecord> records = {JobCancelled{JobId{"a"}, at(0)},
                                                    JobCancelled{JobId{"b"}, at(1)}};
  append(store, records);
  store::NewEvent damaged =
      own_event("trial.reconciled", R"({"trial":{"job":"a","index":0},"attempt":1,)"
                                    R"("outcome":"exploded","at":1})");
  damaged.id = store::numbered_event_id(3);
  const std::vector<store::NewEvent> tail = {damaged, to_event(JobCancelled{JobId{"c"}, at(2)}, 4)};
  REQUIRE(store.append(kOrchestrationRun, 2, tail).has_value());

  std::vector<OrchestrationRecord> seen;
  const auto read = read_log(
      store.snapshot(), [&](const OrchestrationRecord& record) { seen.push_back(record); },
      [](const store::EventView&) { FAIL("no other events"); });
  REQUIRE_FALSE(read.has_value());
  CHECK(read.error().message ==
        "the orchestration log (run forktrial.orchestration) is corrupt: event evt_003 "
        "(trial.reconciled): field \"outcome\" \"exploded\" is not an outcome name");
  // What came before the damage was handed over; nothing after it.
  CHECK(seen == records);
}

TEST_CASE("a scheduler replaying the log from the store has the state of the one that wrote it",
          "[coordinator][orchestration_log]") {
  testing::Logged live(testing::kMorningConfig);
  testing::busy_morning(live);

  forktrial::testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "store";
  {
    store::EventStore store(path, quick_options());
    // Transactions of 1, 2, 3, ... records; each trial.reconciled has its
    // verdict, as a reconciliation does (a trial.settled event, which folds
    // in the trial.reported of the same transaction where it may).
    std::size_t from = 0;
    for (std::size_t size = 1; from < live.log.size(); ++size) {
      const std::size_t to = std::min(live.log.size(), from + size);
      const std::span<const OrchestrationRecord> batch(live.log.data() + from, to - from);
      std::vector<Verdict> verdicts;
      std::map<AttemptRef, WorkerId> reporter;
      for (const OrchestrationRecord& record : live.log) {
        if (const auto* reported = std::get_if<TrialReported>(&record))
          reporter[{reported->trial, reported->attempt}] = reported->worker;
      }
      for (const OrchestrationRecord& record : batch) {
        if (const auto* reconciled = std::get_if<TrialReconciled>(&record)) {
          verdicts.push_back(Verdict{reconciled->trial, reconciled->attempt,
                                     reporter[{reconciled->trial, reconciled->attempt}],
                                     R"({"of":")" + reconciled->trial.str() + R"("})"});
        }
      }
      const auto head = store.write([&](store::Writer& writer) {
        return append_to_log(writer, batch, {}, kJobChunkBytes, verdicts);
      });
      REQUIRE(head.has_value());
      for (const Verdict& verdict : verdicts) CHECK(verdict.seq > 0);
      from = to;
    }
  }

  // A restarted coordinator: a new process opening the store.
  store::EventStore store(path, quick_options());
  Scheduler restarted;
  std::size_t replayed = 0;
  std::vector<std::string> results;
  const auto read = read_log(
      store.snapshot(),
      [&](const OrchestrationRecord& record) {
        restarted.replay(record);
        ++replayed;
      },
      [&](const store::EventView& event) { results.emplace_back(event.payload); });
  REQUIRE(read.has_value());
  CHECK(replayed == live.log.size());
  REQUIRE(results.size() == 1);
  CHECK_THAT(results[0], Catch::Contains(R"("verdict":{"of":"b#0"})"));
  CHECK(restarted.state_text() == live.scheduler.state_text());
}

// One thread's linear-time codec: under a sanitizer, which multiplies its
// cost (138 s under ThreadSanitizer at full size), a tenth of the trials
// still shows the encoding exact.
#ifdef FORKTRIAL_SANITIZED
constexpr std::uint32_t kBigJob = 10'000;
#else
constexpr std::uint32_t kBigJob = 100'000;
#endif

TEST_CASE("a compacted log holds the snapshot, and rebuilds a state that answers alike",
          "[coordinator][orchestration_log][snapshot]") {
  testing::Logged live(testing::kMorningConfig);
  testing::busy_morning(live);
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  append(store, live.log);
  const Records snapshot = live.scheduler.snapshot(at(500'000));
  store::NewEvent result = event_of("trial.verdict", R"({"job":"a","index":0})");
  const auto compacted = store.write([&](store::Writer& writer) {
    return compact_log(writer, snapshot, std::span(&result, 1), 1, at(500'000));
  });
  REQUIRE(compacted.has_value());
  CHECK(compacted->generation == 1);
  CHECK(compacted->replaced_events > 0);
  const auto read = read_all(store);
  REQUIRE(read.has_value());
  REQUIRE(read->records.size() < live.log.size());
  CHECK(read->records == snapshot);
  REQUIRE(read->others.size() == 2);  // the result, then the marker
  CHECK(read->others[0].type == "trial.verdict");
  CHECK(read->others[0].seq == compacted->seq - 1);
  CHECK(read->others[1].type == "log.snapshot");
  store::EventView marker = store::view_of(read->others[1]);
  marker.seq = read->others[1].seq;
  CHECK(log_snapshot_of(marker) == *compacted);
  CHECK(testing::replayed(read->records, testing::kMorningConfig).query_text() ==
        live.scheduler.query_text());
  // Records appended after the snapshot follow it, numbered on.
  const std::vector<OrchestrationRecord> more{JobCancelled{JobId{"a"}, at(500'001)}};
  CHECK(append(store, more) == compacted->seq + 1);
  // A second compaction is the next generation, and replaces the first.
  const auto again = store.write(
      [&](store::Writer& writer) { return compact_log(writer, snapshot, {}, 2, at(500'002)); });
  REQUIRE(again.has_value());
  CHECK(again->generation == 2);
  CHECK(again->replaced_events == compacted->seq + 1);
  CHECK(again->seq == compacted->seq - 1);
}

TEST_CASE("a compaction refused or failing mid-way leaves the log as it was",
          "[coordinator][orchestration_log][snapshot]") {
  testing::Logged live(testing::kMorningConfig);
  testing::busy_morning(live);
  forktrial::testing::TempDir dir;
  bool fail_commit = false;
  store::StoreOptions options = quick_options();
  options.before_commit = [&] {
    if (fail_commit) throw store::StoreFull("no room left on the device (simulated)");
  };
  store::EventStore store(dir.path() / "store", options);
  append(store, live.log);
  const auto before = read_all(store);
  REQUIRE(before.has_value());
  const std::uint64_t head = store.snapshot().run(kOrchestrationRun)->head;
  const Records snapshot = live.scheduler.snapshot(at(500'000));
  SECTION("an extra event the store refuses, after the old log was deleted in the transaction") {
    store::NewEvent bad = event_of("trial.verdict", "{}");
    bad.type = "";  // an empty type breaks the store's rules
    const auto refused = store.write([&](store::Writer& writer) {
      return compact_log(writer, snapshot, std::span(&bad, 1), 1, at(500'000));
    });
    CHECK_FALSE(refused.has_value());
  }
  SECTION("the commit failing, as on a full disk") {
    fail_commit = true;
    CHECK_THROWS_AS(store.write([&](store::Writer& writer) {
      return compact_log(writer, snapshot, {}, 1, at(500'000));
    }),
                    store::StoreFull);
    fail_commit = false;
  }
  const auto after = read_all(store);
  REQUIRE(after.has_value());
  CHECK(after->records == before->records);
  CHECK(after->order == before->order);
  CHECK(store.snapshot().run(kOrchestrationRun)->head == head);
}

TEST_CASE("a job of 100000 trials round-trips in one event", "[coordinator][orchestration_log]") {
  JobSubmitted job{JobId{"big"}, 5, "a big job", {}, at(0)};
  job.trials.reserve(kBigJob);
  std::string payload(600, 'x');
  for (std::uint32_t i = 0; i < kBigJob; ++i) {
    const std::string number = std::to_string(i);
    payload.replace(0, number.size(), number);
    job.trials.push_back(TrialInput{
        payload, digest(static_cast<int>(i % 97)), {digest(static_cast<int>(1000 + i % 5))}});
  }
  job.trials[123].payload = "{\"quote\": \"\\\"\", \"line\": \"\n\", \"bytes\": \"\xff\"}";
  const store::NewEvent event = to_event(job, 1);
  CHECK(event.payload.size() > std::size_t{kBigJob} * 600);
  const auto decoded = record_of(store::view_of(event));
  REQUIRE(decoded.has_value());
  const auto& back = std::get<JobSubmitted>(*decoded);
  CHECK(back.trials.size() == kBigJob);
  CHECK(back.trials[123].payload == job.trials[123].payload);
  CHECK(back.trials[kBigJob - 1] == job.trials[kBigJob - 1]);
  CHECK(back == job);
}

// A job of `count` trials whose payloads are about `size` bytes each.
JobSubmitted sized_job(std::string id, std::uint32_t count, std::size_t size) {
  JobSubmitted job{JobId{std::move(id)}, 2, "sized", {}, at(9), "owner-key"};
  for (std::uint32_t i = 0; i < count; ++i) {
    job.trials.push_back(TrialInput{std::to_string(i) + std::string(size, i % 2 ? 'a' : '\xff'),
                                    digest(static_cast<int>(i % 7)),
                                    {digest(100)},
                                    Duration{i}});
  }
  return job;
}

std::uint64_t append_chunked(store::EventStore& store, std::span<const OrchestrationRecord> records,
                             std::span<const store::NewEvent> extra, std::size_t chunk_bytes) {
  const auto head = store.write(
      [&](store::Writer& writer) { return append_to_log(writer, records, extra, chunk_bytes); });
  if (!head) FAIL(head.error().message);
  return *head;
}

TEST_CASE("a large job is cut into job.trials events and read back as one record",
          "[coordinator][orchestration_log]") {
  forktrial::testing::TempDir dir;
  store::EventStore store(dir.path() / "store", quick_options());
  const JobSubmitted big = sized_job("big", 50, 100);
  const JobSubmitted small = sized_job("small", 2, 10);
  const std::vector<OrchestrationRecord> records = {JobCancelled{JobId{"x"}, at(1)}, big, small,
                                                    JobCancelled{JobId{"big"}, at(2)}};
  const std::vector<store::NewEvent> extra = {own_event("trial.result", "{}")};
  // A few trials of text to an event.
  const std::uint64_t head = append_chunked(store, records, extra, 1000);

  const auto snapshot = store.snapshot();
  std::vector<store::Event> events;
  snapshot.for_each_event(*snapshot.run(kOrchestrationRun), 1, [&](const store::EventView& e) {
    events.push_back(e.to_event());
    return true;
  });
  REQUIRE(events.size() == head);
  std::size_t parts = 0;
  for (const store::Event& event : events) {
    parts += event.type == "job.trials" ? 1 : 0;
    CHECK(event.payload.size() < 1000 + 500);  // a chunk ends with the trial that reaches it
  }
  CHECK(parts >= 10);
  CHECK(head == 1 + (1 + parts) + 1 + 1 + 1);
  CHECK(events[1].type == "job.submitted");
  CHECK(events[2 + parts].type == "job.submitted");
  // The first of the job's events is not a whole record by itself.
  CHECK_THAT(record_of(store::view_of(events[1])).error().message,
             Catch::Contains("is the first of a job's events"));
  // The small job, which fits, is written as builds before chunking wrote it.
  CHECK(events[2 + parts].payload == to_event(small, 3 + parts).payload);

  const auto read = read_all(store);
  REQUIRE(read.has_value());
  CHECK(read->records == records);
  CHECK(read->order == std::vector<std::string>{"r:job.cancelled", "r:job.submitted",
                                                "r:job.submitted", "r:job.cancelled",
                                                "o:trial.result"});
}

TEST_CASE("a job's events that do not add up make the log corrupt",
          "[coordinator][orchestration_log]") {
  // The events of a job of 12 trials, cut to about three a chunk.
  const JobSubmitted job = sized_job("j", 12, 100);
  std::vector<store::NewEvent> events;
  {
    forktrial::testing::TempDir dir;
    store::EventStore store(dir.path() / "store", quick_options());
    const std::vector<OrchestrationRecord> records = {job};
    append_chunked(store, records, {}, 600);
    const auto snapshot = store.snapshot();
    snapshot.for_each_event(*snapshot.run(kOrchestrationRun), 1, [&](const store::EventView& e) {
      events.push_back(e.to_event());
      return true;
    });
  }
  REQUIRE(events.size() >= 4);
  REQUIRE(events[1].type == "job.trials");
  // Where each of the job's events starts.
  const auto first = [&](std::size_t event) {
    return std::to_string(nlohmann::json::parse(events[event].payload)["first"].get<int>());
  };

  // The error read_log gives for the log of `log`'s events, renumbered.
  const auto error_of = [](std::vector<store::NewEvent> log) {
    forktrial::testing::TempDir dir;
    store::EventStore store(dir.path() / "store", quick_options());
    REQUIRE(store.create_run(store::NewRun{.id = kOrchestrationRun}).has_value());
    for (std::size_t i = 0; i < log.size(); ++i) log[i].id = store::numbered_event_id(i + 1);
    REQUIRE(store.append(kOrchestrationRun, 0, log).has_value());
    const auto read = read_log(
        store.snapshot(), [](const OrchestrationRecord&) {}, [](const store::EventView&) {});
    return read ? std::string("read") : read.error().message;
  };
  CHECK(error_of(events) == "read");
  // The log ends in the middle of the job.
  CHECK_THAT(error_of({events[0], events[1]}),
             Catch::EndsWith("the log ends with job j holding " + first(2) + " of its 12 trials"));
  // Another record between the job's events.
  CHECK_THAT(error_of({events[0], to_event(JobCancelled{JobId{"j"}, at(1)}, 2), events[1]}),
             Catch::Contains("event evt_002 (job.cancelled): job j has " + first(1) +
                             " of its 12 trials, and this event does not continue it"));
  // A part out of its place.
  CHECK_THAT(error_of({events[0], events[2], events[1], events[3]}),
             Catch::Contains("holds trials " + first(2) + ".." + first(3) +
                             " of job j, where job j continues at trial " + first(1) + " of 12"));
  // A part with no job before it.
  CHECK_THAT(error_of({events[1]}),
             Catch::Contains("continues a job.submitted record, and is read with it"));
  // A part of another job.
  store::NewEvent other = events[1];
  other.payload.replace(other.payload.find("\"j\""), 3, "\"k\"");
  CHECK_THAT(error_of({events[0], other}), Catch::Contains("of job k, where job j continues"));
  // A trial count the first event already holds.
  store::NewEvent whole = events[0];
  whole.payload.replace(whole.payload.find("\"trial_count\":12"), 16,
                        "\"trial_count\":" + first(1));
  CHECK_THAT(error_of({whole}),
             Catch::Contains("holds " + first(1) + " trials of a trial_count of " + first(1) +
                             ", and a job cut into events"));
  whole.payload.replace(whole.payload.find("\"trial_count\":" + first(1)), 14 + first(1).size(),
                        "\"trial_count\":-1");
  CHECK_THAT(error_of({whole}),
             Catch::Contains("field \"trial_count\" is -1, not a positive integer"));
}

}  // namespace
}  // namespace forktrial::coordinator
