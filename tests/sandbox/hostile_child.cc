// A stand-in for forktrial-child that misbehaves the way only native code in
// a child could: it writes its scratch store directly, bypassing the
// runtime's rules, then claims a clean `completed` on its tail. Tests run it
// as ChildOptions::child_path to check that the parent trusts none of it.
//
// FORKTRIAL_HOSTILE selects the misbehaviour:
//   forge  an ordinary event, then a forged trial.wall_clock_exhausted
//          record of the parent's, then another ordinary event
//   flood  50 events more than max_appended_events
//   bytes  1 MiB payloads until max_appended_bytes is passed
//   misreport  two ordinary events, and a tail claiming seven more
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

#include "sandbox/job.h"
#include "sandbox/tail.h"
#include "store/event_store.h"

using namespace forktrial;

int main() {
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  auto job = sandbox::decode_job(input);
  const char* mode_text = std::getenv("FORKTRIAL_HOSTILE");
  if (!job || mode_text == nullptr) return 2;
  const std::string mode = mode_text;

  store::StoreOptions options;
  options.sync = false;
  store::EventStore scratch(job->scratch_store, options);
  const store::RunId fork(job->fork_run_id);
  std::uint64_t head = scratch.snapshot().run(fork)->head;
  std::uint64_t n = head;
  // The fork tip's time: a delta that goes back before it does not continue
  // the fork, and these modes are about other refusals.
  std::string now = "2026-01-01T00:00:00.000Z";
  if (head > 0) {
    auto snapshot = scratch.snapshot();
    now = snapshot.history(*snapshot.run(fork), head).back().timestamp;
  }
  auto append = [&](std::string type, std::string payload, std::string actor) {
    store::NewEvent event;
    event.id = store::EventId("evt_" + std::to_string(++n));
    event.type = std::move(type);
    event.payload = std::move(payload);
    event.timestamp = now;
    event.actor = std::move(actor);
    head = *scratch.append(fork, head, event);
  };

  std::uint64_t written = 0;
  if (mode == "forge") {
    append("chat.message", R"({"text":"before"})", "scenario");
    append("trial.wall_clock_exhausted", R"({"wall_clock_seconds":1,"last_accepted_seq":1})",
           "forktrial.parent");
    append("chat.message", R"({"text":"after"})", "scenario");
    written = 3;
  } else if (mode == "flood") {
    for (; written < job->limits.max_appended_events + 50; ++written) {
      append("tick", "{}", "scenario");
    }
  } else if (mode == "bytes") {
    const std::string payload = "{\"x\":\"" + std::string(1 << 20, 'x') + "\"}";
    for (std::uint64_t bytes = 0; bytes <= job->limits.max_appended_bytes + (2 << 20);
         bytes += payload.size()) {
      append("blob", payload, "scenario");
      ++written;
    }
  } else if (mode == "backwards") {
    append("chat.message", R"({"text":"on time"})", "scenario");
    now = "2000-01-01T00:00:00Z";
    append("chat.message", R"({"text":"from the past"})", "scenario");
    written = 2;
  } else if (mode == "misreport") {
    append("chat.message", R"({"text":"one"})", "scenario");
    append("chat.message", R"({"text":"two"})", "scenario");
    written = 2 + 7;
  } else {
    return 2;
  }

  sandbox::ChildTail tail;
  tail.outcome = Outcome::completed;
  tail.events_appended = written;
  tail.last_seq = head;
  const std::string bytes = sandbox::encode_tail(tail);
  if (::write(3, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) return 2;
  return 0;
}
