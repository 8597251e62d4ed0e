// What the coordinator benchmarks share: a store seeded with a root run and
// the greeter pack's bundle, and the frames of a client and of a worker that
// runs nothing (its report of a trivial trial appends `events` events of a
// few bytes). Header-only; not a benchmark of its own (only bench/*_bench.cc
// are).
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"

namespace forktrial::bench {

// Takes `NAME VALUE` at argv[i] into `out` when VALUE is a whole number in
// [low, high], and moves i to VALUE; false, with i unmoved, otherwise.
template <typename Number>
bool number_option(int argc, char** argv, int& i, std::string_view name, std::uint64_t low,
                   std::uint64_t high, Number& out) {
  if (name != argv[i] || i + 1 >= argc) return false;
  char* end = nullptr;
  const std::uint64_t value = std::strtoull(argv[i + 1], &end, 10);
  if (end == argv[i + 1] || *end != '\0' || value < low || value > high) return false;
  out = static_cast<Number>(value);
  ++i;
  return true;
}

// Seeds `store` with a root run of 31 events and the greeter pack's bundle,
// as the core tests seed theirs; returns a trial specification forking the
// run at evt_031.
inline std::string seed_trivial_store(const std::filesystem::path& store) {
  const std::filesystem::path source(FORKTRIAL_SOURCE_DIR);
  store::EventStore events(store);
  std::vector<store::NewEvent> history;
  for (int i = 1; i <= 31; ++i) {
    store::NewEvent event;
    event.id = store::numbered_event_id(static_cast<std::uint64_t>(i));
    event.type = "note.added";
    event.payload = R"({"n":)" + std::to_string(i) + "}";
    event.timestamp = "2026-01-05T10:00:00Z";
    history.push_back(std::move(event));
  }
  if (!events.import_run({.id = store::RunId("run_chat"), .label = "chat"}, history)) {
    throw std::runtime_error("cannot import the parent run");
  }
  auto archive = pack::archive_pack(source / "examples/packs/greeter");
  if (!archive) throw std::runtime_error("cannot archive examples/packs/greeter");
  events.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
  return R"({"candidate":"greeter","spec":{"at_event":"evt_031","candidate":{"root_dir":")" +
         wire::bundle_root(Sha256::of(archive->bytes)) + R"(","expected_bundle_hash":")" +
         archive->bundle_hash.str() +
         R"("},"extra_packs":[],"label":"t","limits":{},"parent_run_id":"run_chat",)"
         R"("scenario":"","schema_version":1}})";
}

inline std::string client_hello_frame(std::uint64_t request) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).setClientHello();
  return wire::encode(message);
}

inline std::string worker_hello_frame(std::uint64_t request, const std::string& id,
                                      std::uint32_t slots) {
  capnp::MallocMessageBuilder message;
  auto hello = wire::start(message, request).initWorkerHello();
  hello.setWorkerId(id);
  hello.setSlots(slots);
  hello.setIsolation("{}");
  return wire::encode(message);
}

// A job of `trials` copies of `trial`; `token` "" for none.
inline std::string submission_frame(std::uint64_t request, const std::string& name,
                                    std::uint32_t trials, const std::string& trial,
                                    const std::string& token = "") {
  capnp::MallocMessageBuilder message;
  auto job = wire::start(message, request).initSubmitJob();
  job.setName(name);
  if (!token.empty()) job.setToken(token);
  auto specs = job.initSpecs(trials);
  for (std::uint32_t i = 0; i < trials; ++i) specs.set(i, trial);
  return wire::encode(message);
}

inline std::string request_work_frame(std::uint64_t request, std::uint32_t free_slots) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).initRequestWork().setFreeSlots(free_slots);
  return wire::encode(message);
}

// A worker's report of a trivial completed trial: `events` events appended.
inline std::string report_frame(std::uint64_t request, schema::wire::TrialRef::Reader trial,
                                std::uint32_t events) {
  capnp::MallocMessageBuilder message;
  auto report = wire::start(message, request).initReport();
  report.setTrial(trial);
  report.setOutcome(schema::TrialOutcome::COMPLETED);
  report.setDetail("ran");
  auto list = report.initEvents(events);
  for (std::uint32_t i = 0; i < events; ++i) {
    list[i].setId("evt_new_" + std::to_string(i));
    list[i].setType("note.added");
    list[i].setPayload("{}");
    list[i].setTimestamp("2026-01-05T10:00:00Z");
    list[i].getActor().setActorName("candidate");
  }
  return wire::encode(message);
}

}  // namespace forktrial::bench
