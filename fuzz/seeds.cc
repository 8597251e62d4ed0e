// Writes the seed corpora of the targets whose inputs are binary: the wire
// coordinator and session targets' Cap'n Proto frames, and the segment
// target's segments and stored event values (the other seeds are copies of
// examples and test fixtures): `fuzz_seeds SOURCE_DIR OUT_DIR` writes
// OUT_DIR/wire/*, OUT_DIR/coordinator/*, OUT_DIR/session/* and
// OUT_DIR/segment/*. Not built by default: the corpora are committed,
// and this is run again only when the wire schema changes
// (cmake --build build/fuzz --target fuzz_seeds).
#include <capnp/message.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "import/jsonl.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/codec.h"
#include "store/event_store.h"

namespace fs = std::filesystem;
namespace wire = forktrial::wire;
using forktrial::schema::wire::Envelope;

namespace {

using Build = std::function<void(Envelope::Builder)>;

std::string frame(std::uint64_t request, const Build& build) {
  capnp::MallocMessageBuilder message;
  build(wire::start(message, request));
  return wire::encode(message);
}

void write(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

// One record of the coordinator target's input format (coordinator_fuzz.cc).
std::string record(unsigned peer, unsigned seconds, const std::string& bytes) {
  std::string out;
  out += static_cast<char>(peer | (seconds << 2));
  out += static_cast<char>(bytes.size() & 0xff);
  out += static_cast<char>(bytes.size() >> 8);
  return out + bytes;
}

std::string text(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Segments of examples/runs/chat.jsonl (its first event, its first three,
// all of it) and the stored values of a few of its events.
void write_segments(const fs::path& source, const fs::path& out) {
  namespace store = forktrial::store;
  const fs::path dir = fs::temp_directory_path() / "forktrial-fuzz-seeds";
  fs::remove_all(dir);
  {
    store::EventStore events(dir);
    std::ifstream history(source / "examples/runs/chat.jsonl");
    auto parsed = forktrial::import::jsonl::parse_events(history);
    const store::RunId run("run_chat");
    if (!parsed || !events.import_run({.id = run, .label = "chat"}, *parsed)) std::abort();
    for (std::uint64_t up_to :
         {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{parsed->size()}}) {
      auto digest = events.write([&](store::Writer& w) { return w.store_segment(run, up_to); });
      if (!digest) std::abort();
      auto snapshot = events.snapshot();
      write(out / ("chat_" + std::to_string(up_to)), text(*snapshot.blob(*digest)));
    }
    for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
      const store::NewEvent& event = (*parsed)[i];
      std::vector<std::byte> value(store::codec::encoded_event_size(event, i + 1));
      store::codec::encode_event(event, i + 1, value);
      write(out / ("event_" + std::to_string(i + 1)), text(value));
    }
  }
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_seeds SOURCE_DIR OUT_DIR\n";
    return 2;
  }
  const fs::path source = argv[1];
  const fs::path out = argv[2];
  auto archive = forktrial::pack::archive_pack(source / "examples/packs/chat_echo");
  if (!archive) {
    std::cerr << "fuzz_seeds: " << archive.error().message << "\n";
    return 1;
  }
  const auto archive_digest = forktrial::Sha256::of(archive->bytes);
  const std::string spec =
      R"({"at_event":"evt_009","candidate":{"root_dir":")" + wire::bundle_root(archive_digest) +
      R"(","expected_bundle_hash":")" + archive->bundle_hash.str() +
      R"("},"extra_packs":[],"label":"seed","limits":{"max_events":100,"wall_clock_seconds":5},)"
      R"("parent_run_id":"run_chat","scenario":"scenarios/replay.lua","schema_version":1})";
  const std::string payload = R"({"candidate":"chat_echo","spec":)" + spec + "}";
  const std::string job = "job_00000000000000a1";

  auto trial_ref = [&](forktrial::schema::wire::TrialRef::Builder ref, std::uint32_t attempt) {
    ref.setJob(job);
    ref.setIndex(0);
    ref.setAttempt(attempt);
  };
  const std::vector<std::pair<std::string, std::string>> frames = {
      {"client_hello", frame(1, [](Envelope::Builder e) { e.setClientHello(); })},
      {"submit_job", frame(2,
                           [&](Envelope::Builder e) {
                             auto s = e.initSubmitJob();
                             s.setName("seed");
                             s.setPriority(1);
                             s.setToken("00000000000000a1");
                             s.initSpecs(1).set(0, payload);
                             auto b = s.initBundles(1)[0];
                             wire::set_digest(b.initPin(), archive->bundle_hash);
                             wire::set_digest(b.initArchive(), archive_digest);
                           })},
      {"worker_hello", frame(3,
                             [&](Envelope::Builder e) {
                               auto h = e.initWorkerHello();
                               h.setWorkerId("w1");
                               h.setSlots(2);
                               h.setPrefetch(1);
                               h.initWarnings(1).set(0, "net degraded");
                               h.setIsolation(R"({"userns":true})");
                               wire::set_digest(h.initCached(1)[0], archive_digest);
                             })},
      {"request_work", frame(4, [](Envelope::Builder e) { e.initRequestWork().setFreeSlots(2); })},
      {"heartbeat",
       frame(5, [&](Envelope::Builder e) { trial_ref(e.initHeartbeat().initRunning(1)[0], 1); })},
      {"report", frame(6,
                       [&](Envelope::Builder e) {
                         auto r = e.initReport();
                         trial_ref(r.initTrial(), 1);
                         r.setOutcome(forktrial::schema::TrialOutcome::COMPLETED);
                         r.setDetail("ok");
                         r.setExitCode(0);
                         r.setHasClaim(true);
                         r.setClaimedEvents(1);
                         r.setDurationMillis(12);
                         auto ev = r.initEvents(1)[0];
                         ev.setId("evt_fuzz_1");
                         ev.setType("chat.reply");
                         ev.setPayload(R"({"text":"hi"})");
                         ev.setTimestamp("2026-01-05T09:10:00Z");
                         ev.getActor().setActorName("chat_echo");
                         ev.getFrame().setNoFrame();
                         ev.getCause().setCausedBy("evt_009");
                       })},
      {"attempt_failed", frame(7,
                               [&](Envelope::Builder e) {
                                 auto f = e.initAttemptFailed();
                                 trial_ref(f.initTrial(), 1);
                                 f.setReason("could not materialize");
                               })},
      {"fetch_blob", frame(8,
                           [&](Envelope::Builder e) {
                             auto f = e.initFetchBlob();
                             wire::set_digest(f.initDigest(), archive_digest);
                             f.setOffset(0);
                             f.setLength(64);
                           })},
      {"find_missing", frame(9,
                             [&](Envelope::Builder e) {
                               auto d = e.initFindMissing().initDigests(2);
                               wire::set_digest(d[0], archive_digest);
                               wire::set_digest(d[1], archive->bundle_hash);
                             })},
      {"put_blob", frame(10,
                         [&](Envelope::Builder e) {
                           const std::string bytes = "blob";
                           auto c = e.initPutBlob();
                           wire::set_digest(c.initDigest(), forktrial::Sha256::of(bytes));
                           c.setTotalSize(bytes.size());
                           c.setOffset(0);
                           c.setBytes(capnp::Data::Reader(
                               reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
                         })},
      {"status", frame(11, [&](Envelope::Builder e) { e.initStatusRequest().setJob(job); })},
      {"status_all", frame(12, [](Envelope::Builder e) { e.initStatusRequest().setJob(""); })},
      {"results", frame(13,
                        [&](Envelope::Builder e) {
                          auto q = e.initResultsRequest();
                          q.setJob(job);
                          q.setAfter(0);
                          q.setLimit(10);
                        })},
      {"workers", frame(14, [](Envelope::Builder e) { e.setWorkersRequest(); })},
      {"cancel", frame(15, [&](Envelope::Builder e) { e.initCancelJob().setJob(job); })},
      {"error", frame(16,
                      [](Envelope::Builder e) {
                        auto err = e.initError();
                        err.setCode(forktrial::schema::wire::ErrorCode::INVALID_ARGUMENT);
                        err.setMessage("refused");
                      })},
      {"ok", frame(17, [](Envelope::Builder e) { e.setOk(); })},
  };
  std::map<std::string, std::string> by_name(frames.begin(), frames.end());
  for (const auto& [name, bytes] : frames) write(out / "wire" / name, bytes);

  // Conversations: peer 0 is a client, peer 1 a worker.
  auto conversation = [&](std::vector<std::tuple<unsigned, unsigned, std::string>> steps) {
    std::string bytes;
    for (const auto& [peer, seconds, name] : steps)
      bytes += record(peer, seconds, by_name.at(name));
    return bytes;
  };
  const fs::path c = out / "coordinator";
  write(c / "run_a_trial", conversation({{0, 0, "client_hello"},
                                         {0, 0, "submit_job"},
                                         {1, 0, "worker_hello"},
                                         {1, 0, "request_work"},
                                         {1, 1, "heartbeat"},
                                         {1, 1, "report"},
                                         {0, 0, "status"},
                                         {0, 0, "results"},
                                         {0, 0, "workers"}}));
  write(c / "lease_lapses", conversation({{0, 0, "client_hello"},
                                          {0, 0, "submit_job"},
                                          {1, 0, "worker_hello"},
                                          {1, 0, "request_work"},
                                          {1, 63, "heartbeat"},
                                          {1, 1, "report"},
                                          {1, 0, "attempt_failed"},
                                          {0, 0, "status_all"}}));
  write(c / "cancel_running", conversation({{0, 0, "client_hello"},
                                            {0, 0, "submit_job"},
                                            {1, 0, "worker_hello"},
                                            {1, 0, "request_work"},
                                            {0, 0, "cancel"},
                                            {1, 0, "report"},
                                            {0, 0, "submit_job"}}));
  write(c / "blobs", conversation({{0, 0, "client_hello"},
                                   {0, 0, "find_missing"},
                                   {0, 0, "put_blob"},
                                   {1, 0, "worker_hello"},
                                   {1, 0, "fetch_blob"},
                                   {2, 0, "request_work"},
                                   {0, 0, "error"},
                                   {0, 0, "ok"}}));

  // The worker session's conversations (session_fuzz.cc): what a
  // coordinator sends a worker, with time passing, trials held and finished.
  const std::vector<std::pair<std::string, std::string>> to_worker = {
      {"welcome", frame(1, [](Envelope::Builder e) { e.initWelcome().setLeaseMillis(30'000); })},
      {"assignments", frame(2,
                            [&](Envelope::Builder e) {
                              auto list = e.initAssignments().initAssignments(2);
                              for (unsigned i = 0; i < 2; ++i) {
                                trial_ref(list[i].initTrial(), i + 1);
                                list[i].setSpec(spec);
                                list[i].setForkRunId("run_fork");
                              }
                            })},
      {"no_assignments", frame(3, [](Envelope::Builder e) { e.initAssignments(); })},
      {"ack", frame(0,
                    [&](Envelope::Builder e) {
                      auto ack = e.initReportAck();
                      trial_ref(ack.initTrial(), 1);
                      ack.setVerdict(forktrial::schema::wire::ReportVerdict::ACCEPTED);
                    })},
      {"stop",
       frame(0, [&](Envelope::Builder e) { trial_ref(e.initStopTrials().initTrials(1)[0], 2); })},
      {"busy", frame(4,
                     [](Envelope::Builder e) {
                       auto err = e.initError();
                       err.setCode(forktrial::schema::wire::ErrorCode::UNAVAILABLE);
                       err.setMessage("the store is full");
                     })},
      {"out_of_order", frame(5,
                             [](Envelope::Builder e) {
                               auto err = e.initError();
                               err.setCode(forktrial::schema::wire::ErrorCode::FAILED_PRECONDITION);
                               err.setMessage("say hello first");
                             })},
  };
  std::map<std::string, std::string> worker_frames(to_worker.begin(), to_worker.end());
  // A record of the session target: a frame in (0), time passing and a step
  // (1, with tenths of a second), a held attempt finishing (2), the newest
  // assigned attempt held (3).
  auto session_conversation = [&](std::vector<std::pair<unsigned, std::string>> steps) {
    std::string bytes;
    for (const auto& [head, name] : steps) {
      bytes += record(head & 3, head >> 2, name.empty() ? "" : worker_frames.at(name));
    }
    return bytes;
  };
  const fs::path s = out / "session";
  write(s / "a_trial", session_conversation({{0, "welcome"},
                                             {1 | 1 << 2, ""},
                                             {0, "assignments"},
                                             {3, ""},
                                             {3, ""},
                                             {1 | 10 << 2, ""},
                                             {2, ""},
                                             {0, "ack"},
                                             {0, "no_assignments"},
                                             {1 | 2 << 2, ""}}));
  write(s / "busy_and_restart", session_conversation({{0, "welcome"},
                                                      {0, "assignments"},
                                                      {3, ""},
                                                      {2, ""},
                                                      {0, "busy"},
                                                      {1 | 5 << 2, ""},
                                                      {1 | 10 << 2, ""},
                                                      {0, "out_of_order"},
                                                      {0, "welcome"},
                                                      {0, "stop"},
                                                      {1 | 63 << 2, ""}}));
  write_segments(source, out / "segment");
  return 0;
}
