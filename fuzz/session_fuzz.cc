// The worker's side of the protocol (worker/session.h WorkerSession), the
// one the worker daemon and the simulation run, against a coordinator that
// may be compromised: frames of every kind, in any order, with any fields,
// and time passing between them. The input is a sequence of records
// {head u8, length u16 LE, bytes}: head & 3 is what happens (0: the bytes
// arrive as a frame; 1: head >> 2 tenths of a second pass and the session
// steps; 2: the oldest attempt held finishes with a report; 3: the newest
// assigned attempt is held, as the worker holds what it accepts).
//
// The properties, after every record: every frame the session sends decodes
// and is a worker's message; it holds only what it was told to hold; and
// after a step it has nothing left to do now (next_step() is in the future),
// so neither the daemon nor the simulation spins.
#include <capnp/message.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "fuzz/check.h"
#include "schema/wire_codec.h"
#include "worker/session.h"

namespace {

using forktrial::schema::wire::Envelope;
using forktrial::worker::AttemptKey;
using forktrial::worker::WorkerSession;

const forktrial::Log quiet = [](forktrial::LogLevel, const std::string&) {};

std::string report(const AttemptKey& key) {
  capnp::MallocMessageBuilder message;
  auto out = forktrial::wire::start(message, 0).initReport();
  forktrial::worker::set_ref(out.initTrial(), key);
  return forktrial::wire::encode(message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  WorkerSession::Clock::time_point now{};
  forktrial::worker::SessionConfig config;
  config.worker_id = "w1";
  config.slots = 2;
  config.prefetch = 2;
  std::size_t sent = 0;
  WorkerSession session(
      config,
      [&](const std::string& frame) {
        auto decoded = forktrial::wire::decode(frame);
        FUZZ_CHECK(decoded.has_value());
        // A worker's message, and not a fetch: the session fetches nothing.
        const auto which = decoded->envelope().which();
        FUZZ_CHECK(forktrial::wire::is_worker_message(which) && which != Envelope::FETCH_BLOB);
        ++sent;
        return true;
      },
      quiet, now);
  session.start(now);
  FUZZ_CHECK(sent == 1);

  std::deque<AttemptKey> held;       // in the order held
  std::vector<AttemptKey> assigned;  // from the last assignments
  std::size_t at = 0;
  while (at + 3 <= size) {
    const std::uint8_t head = data[at];
    const std::size_t length = data[at + 1] | std::size_t{data[at + 2]} << 8;
    at += 3;
    const std::size_t take = std::min(length, size - at);
    const std::string bytes(reinterpret_cast<const char*>(data + at), take);
    at += take;
    switch (head & 3) {
      case 0: {
        auto decoded = forktrial::wire::decode(bytes);
        if (!decoded) break;
        try {
          const auto envelope = decoded->envelope();
          if (session.receive(envelope, now) == forktrial::worker::Received::assignments) {
            assigned.clear();
            for (auto a : envelope.getAssignments().getAssignments()) {
              assigned.push_back(forktrial::worker::attempt_key(a.getTrial()));
            }
          }
        } catch (const kj::Exception&) {
          // A field that cannot be read: the daemon logs it and goes on.
        }
        break;
      }
      case 1:
        now += std::chrono::milliseconds(100) * (head >> 2);
        session.step(now);
        FUZZ_CHECK(session.next_step() > now);
        break;
      case 2:
        if (held.empty()) break;
        session.finished(held.front(), report(held.front()), std::chrono::milliseconds(head));
        held.pop_front();
        break;
      case 3:
        if (assigned.empty() || session.holds(assigned.back())) break;
        session.hold(assigned.back());
        held.push_back(assigned.back());
        assigned.pop_back();
        break;
    }
    FUZZ_CHECK(session.held() == held.size());
  }
  return 0;
}
