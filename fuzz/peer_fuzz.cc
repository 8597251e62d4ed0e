// The coordinator (coordinator/server.h CoordinatorCore) against hostile
// peers that speak the protocol well: where the coordinator target feeds
// raw frames, most of which the decoder refuses, this target builds every
// message through the schema and draws its fields' contents from what an
// attacker would send: invalid UTF-8, invisible and format characters,
// reserved types and actors and their look-alikes, payloads that are not one
// JSON object, timestamps out of order, counts and sizes past every bound.
// The input drives the conversation: which peer speaks, which message it
// sends, and what each field holds.
//
// The properties, after every turn: every reply decodes, and every text the
// coordinator sends (error messages, status and results JSON) is valid UTF-8
// and parses where it is JSON. After the conversation: every event of every
// run in the store keeps the store's rules (store::event_problem) and, when
// a trial wrote it, the payload rule (store/json_text.h), and exports as
// `run export` writes it.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/text.h"
#include "coordinator/server.h"
#include "fuzz/check.h"
#include "fuzz/scratch.h"
#include "import/jsonl.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/event.h"
#include "store/event_store.h"
#include "store/json_text.h"

namespace coordinator = forktrial::coordinator;
namespace wire = forktrial::wire;
namespace store = forktrial::store;
using Envelope = forktrial::schema::wire::Envelope;

namespace {

constexpr std::size_t kMaxMessages = 48;

struct Template {
  std::filesystem::path store;
  std::string spec;  // a trial of examples/packs/chat_echo, as a client submits it
};

const Template& template_store() {
  static const Template made = [] {
    const std::filesystem::path source(FORKTRIAL_SOURCE_DIR);
    Template t{forktrial::fuzz::scratch_dir() / "template", ""};
    store::EventStore events(t.store);
    std::ifstream history(source / "examples/runs/chat.jsonl");
    auto parsed = forktrial::import::jsonl::parse_events(history);
    FUZZ_CHECK(parsed.has_value());
    FUZZ_CHECK(events.import_run({.id = store::RunId("run_chat"), .label = "chat"}, *parsed));
    auto archive = forktrial::pack::archive_pack(source / "examples/packs/chat_echo");
    FUZZ_CHECK(archive.has_value());
    events.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
    t.spec = R"({"at_event":"evt_009","candidate":{"root_dir":")" +
             wire::bundle_root(forktrial::Sha256::of(archive->bytes)) +
             R"(","expected_bundle_hash":")" + archive->bundle_hash.str() +
             R"("},"extra_packs":[],"label":"L","limits":{"max_appended_events":4},)"
             R"("parent_run_id":"run_chat","scenario":"","schema_version":1})";
    return t;
  }();
  return made;
}

// What a hostile peer puts in a message, drawn by the input.
class Hostile {
 public:
  explicit Hostile(FuzzedDataProvider& in) : in_(in) {}

  // Any text a field might hold.
  std::string text() {
    static const char* const kWords[] = {
        "",
        "\xff\xfe",
        "bad \xc3",
        "trial.wall_clock_exhausted",
        "trial.crashed",
        "forktrial.parent",
        "forktrial",
        "runtime",
        "behavior.failed",
        "behavior.completed",
        "pack.loaded",
        "trial\u200b.wall_clock_exhausted",
        "runtime\u2060",
        "forktrial.parent\ufeff",
        "chat.note",
        "candidate",
        "\x1b[2J\x9b",
        "evil\u202etxt",
        "w0",
        "evt_031",
        "evt_001",
    };
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0:
        return in_.ConsumeRandomLengthString(48);
      case 1:
        return std::string(in_.ConsumeIntegralInRange<std::size_t>(0, 300'000),
                           in_.ConsumeBool() ? 'x' : '\x80');
      default:
        return in_.PickValueInArray(kWords);
    }
  }

  std::string payload() {
    static const char* const kPayloads[] = {
        "{}",
        R"({"text": "hi"})",
        R"({"a": )",
        R"({"score": NaN})",
        R"({"a": 1, "a": 2})",
        "[1, 2]",
        "hello",
        "",
        R"({"behavior": "b", "event_id": "evt_031"})",
        R"({"behavior": 5, "event_id": "evt_031"})",
        "{\"s\": \"\xff\"}",
        R"({"s": "\ud800"})",
        R"({"n": 1e999})",
        "{} {}",
    };
    if (in_.ConsumeIntegralInRange(0, 4) == 0) {
      const auto depth = in_.ConsumeIntegralInRange<std::size_t>(1, 400);
      return "{\"d\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
    }
    return in_.ConsumeBool() ? in_.PickValueInArray(kPayloads) : text();
  }

  std::string timestamp() {
    static const char* const kStamps[] = {"2026-01-05T09:00:35Z", "2026-01-05T09:00:36.500Z",
                                          "2020-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
                                          "2026-13-45T99:99:99Z", "yesterday"};
    return in_.ConsumeBool() ? in_.PickValueInArray(kStamps) : text();
  }

  std::uint32_t count() {
    static const std::uint32_t kCounts[] = {0, 1, 2, 8, 64, 100'000, 4'000'000'000u};
    return in_.ConsumeBool() ? in_.PickValueInArray(kCounts) : in_.ConsumeIntegral<std::uint32_t>();
  }

 private:
  FuzzedDataProvider& in_;
};

capnp::Text::Reader as_text(const std::string& s) {
  return {s.data(), s.size()};
}

// Trials leased to a peer: job, and index << 32 | attempt.
using Leases = std::vector<std::pair<std::string, std::uint64_t>>;

// A trial reference: one of those leased so far, or made up.
void set_ref(forktrial::schema::wire::TrialRef::Builder ref, FuzzedDataProvider& in,
             Hostile& hostile, const Leases& leased) {
  if (!leased.empty() && in.ConsumeIntegralInRange(0, 5) != 0) {
    const auto& [job, packed] =
        leased[in.ConsumeIntegralInRange<std::size_t>(0, leased.size() - 1)];
    ref.setJob(job);
    ref.setIndex(static_cast<std::uint32_t>(packed >> 32));
    ref.setAttempt(static_cast<std::uint32_t>(packed) + (in.ConsumeIntegralInRange(0, 7) == 0));
    return;
  }
  const std::string job = hostile.text();
  ref.setJob(as_text(job));
  ref.setIndex(hostile.count());
  ref.setAttempt(hostile.count());
}

// Every text the coordinator sends a peer is valid UTF-8, and the JSON it
// sends parses.
void check_reply(const std::string& frame, Leases& leased) {
  auto decoded = wire::decode(frame);
  FUZZ_CHECK(decoded.has_value());
  const auto envelope = decoded->envelope();
  auto json_ok = [](capnp::Text::Reader text) {
    const std::string_view view(text.begin(), text.size());
    FUZZ_CHECK(!forktrial::first_invalid_utf8(view));
    FUZZ_CHECK(nlohmann::json::accept(view));
  };
  switch (envelope.which()) {
    case Envelope::ERROR:
      FUZZ_CHECK(!forktrial::first_invalid_utf8(std::string_view(
          envelope.getError().getMessage().begin(), envelope.getError().getMessage().size())));
      break;
    case Envelope::JOB_STATUS:
      json_ok(envelope.getJobStatus().getText());
      break;
    case Envelope::WORKERS:
      json_ok(envelope.getWorkers().getText());
      break;
    case Envelope::RUN_IMPORTED:
      json_ok(envelope.getRunImported().getText());
      break;
    case Envelope::RESULTS:
      for (auto line : envelope.getResults().getLines()) json_ok(line);
      break;
    case Envelope::REPORT_ACK: {
      // A verdict the protocol names, with text a worker can read.
      const auto ack = envelope.getReportAck();
      FUZZ_CHECK(static_cast<std::uint16_t>(ack.getVerdict()) <=
                 static_cast<std::uint16_t>(forktrial::schema::wire::ReportVerdict::REFUSED));
      const auto reason = ack.getReason();
      FUZZ_CHECK(!forktrial::first_invalid_utf8(std::string_view(reason.begin(), reason.size())));
      break;
    }
    case Envelope::ASSIGNMENTS:
      for (auto a : envelope.getAssignments().getAssignments()) {
        leased.emplace_back(
            wire::text(a.getTrial().getJob()),
            (std::uint64_t{a.getTrial().getIndex()} << 32) | a.getTrial().getAttempt());
      }
      break;
    default:
      break;
  }
}

// The kinds of message(): 0 a worker's hello, 1-2 an offer of slots, 3-5 a
// report, 6 a failed attempt, 7 a heartbeat, 8 a client's hello, 9 a
// submission, 10 a query or a cancel, 11 an error.
constexpr int kMessageKinds = 12;

// What peer `peer` sends next: peer 0 is a client, the others workers, each
// saying hello first; one message in sixteen is any kind, from anyone.
int next_kind(FuzzedDataProvider& in, unsigned peer, bool said_hello) {
  if (in.ConsumeIntegralInRange(0, 15) == 0) return in.ConsumeIntegralInRange(0, kMessageKinds - 1);
  if (peer == 0) return said_hello ? in.PickValueInArray({9, 9, 10, 10, 11}) : 8;
  return said_hello ? in.PickValueInArray({1, 1, 3, 4, 5, 6, 7, 0}) : 0;
}

// One message of kind `kind` from peer `peer`, built through the schema.
std::string message(FuzzedDataProvider& in, Hostile& hostile, int kind, unsigned peer,
                    std::uint64_t request, const Leases (&leases)[4],
                    const std::vector<std::string>& jobs) {
  // Mostly its own leases; now and then another peer's.
  const Leases& leased =
      leases[in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegralInRange(0u, 3u) : peer];
  capnp::MallocMessageBuilder builder;
  auto envelope = wire::start(builder, request);
  auto some_job = [&]() -> std::string {
    if (!jobs.empty() && in.ConsumeBool()) {
      return jobs[in.ConsumeIntegralInRange<std::size_t>(0, jobs.size() - 1)];
    }
    return in.ConsumeBool() ? "" : hostile.text();
  };
  switch (kind) {
    case 0: {
      auto hello = envelope.initWorkerHello();
      const std::string id =
          in.ConsumeIntegralInRange(0, 3) != 0 ? "w" + std::to_string(peer) : hostile.text();
      hello.setWorkerId(as_text(id));
      hello.setSlots(hostile.count());
      hello.setPrefetch(hostile.count() % 1024);
      auto warnings = hello.initWarnings(in.ConsumeIntegralInRange(0, 80));
      for (unsigned i = 0; i < warnings.size(); ++i) warnings.set(i, as_text(hostile.text()));
      const std::string isolation =
          in.ConsumeBool() ? R"({"level": "standard", "nets": {}})" : hostile.text();
      hello.setIsolation(as_text(isolation));
      break;
    }
    case 1:
    case 2:
      envelope.initRequestWork().setFreeSlots(hostile.count());
      break;
    case 3:
    case 4:
    case 5: {
      auto report = envelope.initReport();
      set_ref(report.initTrial(), in, hostile, leased);
      report.setOutcome(static_cast<forktrial::schema::TrialOutcome>(
          in.ConsumeIntegralInRange(0, 7) != 0 ? in.ConsumeIntegralInRange(0, 4)
                                               : in.ConsumeIntegral<std::uint16_t>()));
      report.setIsolation(static_cast<forktrial::schema::wire::IsolationLevel>(
          in.ConsumeIntegralInRange(0, 7) != 0 ? in.ConsumeIntegralInRange(0, 1)
                                               : in.ConsumeIntegral<std::uint16_t>()));
      const std::string detail = hostile.text();
      report.setDetail(as_text(detail));
      auto warnings = report.initWarnings(in.ConsumeIntegralInRange(0, 70));
      for (unsigned i = 0; i < warnings.size(); ++i) warnings.set(i, as_text(hostile.text()));
      report.setExitCode(in.ConsumeIntegral<std::int32_t>());
      report.setStoppedByNet(in.ConsumeBool());
      report.setWallClockKilled(in.ConsumeIntegralInRange(0, 7) == 0);
      report.setHasClaim(in.ConsumeBool());
      report.setClaimedEvents(hostile.count());
      report.setClaimedFailures(hostile.count());
      report.setForkSeq(in.ConsumeBool() ? 9 : hostile.count());
      report.setDurationMillis(in.ConsumeIntegral<std::uint64_t>());
      // Mostly few events; sometimes more than the trial's budget of 4.
      const unsigned n = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegralInRange(5, 40)
                                                              : in.ConsumeIntegralInRange(0, 4);
      auto events = report.initEvents(n);
      for (unsigned i = 0; i < n; ++i) {
        auto e = events[i];
        // Each field well formed three times in four, so that whole reports
        // pass the rules and are recorded, hostile prose and all.
        auto mostly = [&](const std::string& fine, auto&& hostile_text) {
          return in.ConsumeIntegralInRange(0, 3) != 0 ? fine : std::string(hostile_text());
        };
        e.setId(as_text(mostly("evt_z" + std::to_string(i), [&] { return hostile.text(); })));
        e.setType(as_text(mostly("chat.note", [&] { return hostile.text(); })));
        e.setPayload(as_text(mostly(R"({"text": "hi"})", [&] { return hostile.payload(); })));
        e.setTimestamp(
            as_text(mostly("2026-01-05T09:00:36Z", [&] { return hostile.timestamp(); })));
        if (in.ConsumeBool()) {
          e.getActor().setActorName(as_text(mostly("candidate", [&] { return hostile.text(); })));
        }
        if (in.ConsumeIntegralInRange(0, 3) == 0) e.getFrame().setFrameId(as_text(hostile.text()));
        if (in.ConsumeIntegralInRange(0, 3) == 0) e.getCause().setCausedBy(as_text(hostile.text()));
      }
      break;
    }
    case 6: {
      auto failed = envelope.initAttemptFailed();
      set_ref(failed.initTrial(), in, hostile, leased);
      failed.setReason(as_text(hostile.text()));
      break;
    }
    case 7: {
      auto running = envelope.initHeartbeat().initRunning(
          static_cast<unsigned>(std::min<std::size_t>(leased.size(), 8)));
      for (unsigned i = 0; i < running.size(); ++i) set_ref(running[i], in, hostile, leased);
      break;
    }
    case 8:
      envelope.setClientHello();
      break;
    case 9: {
      auto submit = envelope.initSubmitJob();
      submit.setName(as_text(in.ConsumeBool() ? "job" : hostile.text()));
      if (in.ConsumeIntegralInRange(0, 2) == 0) {
        submit.setToken(as_text(hostile.text()));
      } else if (in.ConsumeBool()) {
        // A job in parts, under one of a few tokens, its parts in any order.
        const std::uint32_t parts = in.ConsumeIntegralInRange(0u, 4u);
        submit.setToken(std::string(15, '0') + std::to_string(in.ConsumeIntegralInRange(0, 3)));
        submit.setParts(parts);
        submit.setPart(in.ConsumeIntegralInRange(0u, parts + 1));
      }
      auto specs = submit.initSpecs(
          in.ConsumeIntegralInRange(0, 15) == 0 ? 0 : in.ConsumeIntegralInRange(1, 3));
      for (unsigned i = 0; i < specs.size(); ++i) {
        std::string spec = template_store().spec;
        if (in.ConsumeBool()) {
          const std::string label =
              nlohmann::json(forktrial::bounded_text(hostile.text(), 600))
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
          spec.replace(spec.find("\"L\""), 3, label);
        }
        const std::string candidate =
            in.ConsumeBool() ? "\"chat_echo\""
                             : nlohmann::json(hostile.text())
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        const std::string whole = in.ConsumeIntegralInRange(0, 15) == 0
                                      ? hostile.text()
                                      : R"({"candidate":)" + candidate + R"(,"spec":)" + spec + "}";
        specs.set(i, as_text(whole));
      }
      break;
    }
    case 10: {
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0:
          envelope.initStatusRequest().setJob(as_text(some_job()));
          break;
        case 1: {
          auto results = envelope.initResultsRequest();
          results.setJob(as_text(some_job()));
          results.setAfter(hostile.count());
          results.setLimit(hostile.count());
          break;
        }
        case 2:
          envelope.initCancelJob().setJob(as_text(some_job()));
          break;
        default:
          envelope.setWorkersRequest();
          break;
      }
      break;
    }
    default: {
      auto error = envelope.initError();
      error.setCode(
          static_cast<forktrial::schema::wire::ErrorCode>(in.ConsumeIntegralInRange(0, 7)));
      error.setMessage(as_text(hostile.text()));
      break;
    }
  }
  return wire::encode(builder);
}

// What a conversation must leave in the store: every event keeps the
// store's rules, every trial's payload is one JSON object, and every run
// exports.
void check_store(const std::filesystem::path& path) {
  store::EventStore events(path);
  auto snapshot = events.snapshot();
  for (const auto& run : snapshot.runs()) {
    snapshot.for_each_event(run, 1, [](const store::EventView& event) {
      FUZZ_CHECK(!store::event_problem(event.to_event()));
      FUZZ_CHECK(!store::json_text::payload_problem(event.payload));
      (void)forktrial::import::jsonl::to_line(event);  // throws on a payload export cannot write
      return true;
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  // FORKTRIAL_FUZZ_VERBOSE=1 prints every reply (with -runs=0 INPUT: what an
  // input reaches).
  static const bool verbose = std::getenv("FORKTRIAL_FUZZ_VERBOSE") != nullptr;
  const Template& base = template_store();
  const std::filesystem::path path =
      forktrial::fuzz::scratch_dir() / ("peer-" + std::to_string(inputs++));
  std::filesystem::copy(base.store, path);
  coordinator::ServerConfig config;
  config.store = path;
  config.max_queued = 1000;
  const forktrial::Log quiet = [](forktrial::LogLevel, const std::string&) {};
  FuzzedDataProvider in(data, size);
  Hostile hostile(in);
  {
    coordinator::CoordinatorCore core(config, quiet);
    coordinator::Instant now{std::chrono::milliseconds(1'700'000'000'000)};
    Leases leased[4];
    std::vector<std::string> jobs;
    bool said_hello[4] = {false, false, false, false};
    for (std::uint64_t request = 1; request <= kMaxMessages && in.remaining_bytes() > 0;
         ++request) {
      // Every conversation opens with a client's submission and a worker's
      // offer, so that most go on to leases and reports; what each message
      // holds is still the input's.
      static constexpr std::pair<unsigned, int> kOpening[] = {{0, 8}, {0, 9}, {1, 0}, {1, 1}};
      const bool opening = request <= std::size(kOpening);
      const unsigned peer =
          opening ? kOpening[request - 1].first : in.ConsumeIntegralInRange(0u, 3u);
      const std::string route = "peer" + std::to_string(peer);
      const int kind =
          opening ? kOpening[request - 1].second : next_kind(in, peer, said_hello[peer]);
      said_hello[peer] = said_hello[peer] || kind == (peer == 0 ? 8 : 0);
      now += std::chrono::milliseconds(
          in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange(0, 60'000) : 0);
      const std::string frame = message(in, hostile, kind, peer, request, leased, jobs);
      for (const auto& [to, reply] : core.turn(route, frame, now)) {
        FUZZ_CHECK(!to.empty());
        check_reply(reply, leased[static_cast<unsigned>(to.back() - '0') % 4]);
        auto decoded = wire::decode(reply);
        if (verbose) {
          const auto envelope = decoded->envelope();
          std::fprintf(stderr, "%s <- arm %u %s\n", to.c_str(),
                       static_cast<unsigned>(envelope.which()),
                       envelope.isError() ? envelope.getError().getMessage().cStr()
                       : envelope.isReportAck()
                           ? wire::verdict_name(envelope.getReportAck().getVerdict()).c_str()
                           : "");
        }
        if (decoded->envelope().which() == Envelope::JOB_ACCEPTED) {
          jobs.push_back(wire::text(decoded->envelope().getJobAccepted().getJob()));
        }
      }
    }
  }
  check_store(path);
  std::filesystem::remove_all(path);
  return 0;
}
