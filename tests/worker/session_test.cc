// The worker's side of the protocol (worker/session.h), in virtual time:
// frames in, frames out, the clock given.
#include "worker/session.h"

#include <capnp/message.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace forktrial::worker {
namespace {

using schema::wire::Envelope;
using namespace std::chrono_literals;

const Log quiet = [](LogLevel, const std::string&) {};

// A session whose frames are kept, decoded, in the order sent.
struct Harness {
  WorkerSession::Clock::time_point now{};
  std::vector<std::string> sent;
  WorkerSession session;
  explicit Harness(SessionConfig config = defaults())
      : session(
            std::move(config),
            [this](const std::string& frame) {
              sent.push_back(frame);
              return true;
            },
            quiet, now) {}

  static SessionConfig defaults() {
    SessionConfig config;
    config.worker_id = "w1";
    config.slots = 2;
    config.prefetch = 0;
    return config;
  }

  // The kinds of the frames sent since the last call.
  std::vector<Envelope::Which> taken() {
    std::vector<Envelope::Which> kinds;
    for (const auto& frame : sent) {
      auto decoded = wire::decode(frame);
      REQUIRE(decoded.has_value());
      kinds.push_back(decoded->envelope().which());
    }
    sent.clear();
    return kinds;
  }

  Received hear(capnp::MallocMessageBuilder& message) {
    const std::string frame = wire::encode(message);
    auto decoded = wire::decode(frame);
    REQUIRE(decoded.has_value());
    return session.receive(decoded->envelope(), now);
  }

  Received welcome(std::uint64_t lease_millis = 30'000) {
    capnp::MallocMessageBuilder message;
    wire::start(message, 0).initWelcome().setLeaseMillis(lease_millis);
    return hear(message);
  }

  // An error answering `request` (0: a frame the coordinator could not read).
  Received error(ErrorCode code, std::uint64_t request = 0) {
    capnp::MallocMessageBuilder message;
    auto error = wire::start(message, request).initError();
    error.setCode(wire::wire_code(code));
    error.setMessage("said so");
    return hear(message);
  }

  Received assignments(std::vector<AttemptKey> keys) {
    capnp::MallocMessageBuilder message;
    auto list = wire::start(message, 0)
                    .initAssignments()
                    .initAssignments(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) set_ref(list[i].initTrial(), keys[i]);
    return hear(message);
  }

  Received ack(const AttemptKey& key) {
    capnp::MallocMessageBuilder message;
    auto ack = wire::start(message, 0).initReportAck();
    set_ref(ack.initTrial(), key);
    ack.setVerdict(schema::wire::ReportVerdict::ACCEPTED);
    return hear(message);
  }
};

using W = Envelope::Which;

}  // namespace

TEST_CASE("a session says hello, offers its slots once welcomed, and heartbeats what it holds",
          "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  CHECK(h.taken() == std::vector{W::WORKER_HELLO});
  h.session.step(h.now);
  CHECK(h.taken().empty());  // not welcomed: no offer

  CHECK(h.welcome() == Received::done);
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::REQUEST_WORK});
  h.session.step(h.now);
  CHECK(h.taken().empty());  // one offer at a time

  const AttemptKey a{"job_1", 0, 1};
  CHECK(h.assignments({a}) == Received::assignments);
  h.session.hold(a);
  h.now += 1s;
  h.session.step(h.now);
  auto sent = h.sent;
  CHECK(h.taken() == std::vector{W::HEARTBEAT, W::REQUEST_WORK});
  auto beat = wire::decode(sent[0]);
  REQUIRE(beat->envelope().getHeartbeat().getRunning().size() == 1);
  CHECK(attempt_key(beat->envelope().getHeartbeat().getRunning()[0]) == a);
}

TEST_CASE("a report is kept until acknowledged and sent again after the next welcome",
          "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  h.welcome();
  const AttemptKey a{"job_1", 3, 2};
  h.session.hold(a);
  h.taken();
  h.session.finished(a, failure_frame(a, "could not run"), 0s);
  CHECK(h.taken() == std::vector{W::ATTEMPT_FAILED});
  CHECK(h.session.held() == 0);
  CHECK(h.session.unacknowledged() == 1);

  // The coordinator restarted: it does not know this worker.
  CHECK(h.error(ErrorCode::failed_precondition) == Received::done);
  CHECK_FALSE(h.session.welcomed());
  CHECK(h.taken() == std::vector{W::WORKER_HELLO});
  h.welcome();
  CHECK(h.taken() == std::vector{W::ATTEMPT_FAILED});
  h.ack(a);
  CHECK(h.session.unacknowledged() == 0);
  h.welcome();
  CHECK(h.taken().empty());
}

TEST_CASE("busy sends what was refused again a second later", "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  h.welcome();
  const AttemptKey a{"job_1", 0, 1};
  h.session.hold(a);
  h.session.finished(a, failure_frame(a, "x"), 0s);
  h.taken();
  CHECK(h.error(ErrorCode::unavailable) == Received::done);
  h.now += 999ms;
  h.session.step(h.now);
  CHECK(h.taken().empty());  // neither the report nor an offer yet
  CHECK(h.session.next_step() == WorkerSession::Clock::time_point{} + 1s);
  h.now += 1ms;
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::HEARTBEAT, W::ATTEMPT_FAILED, W::REQUEST_WORK});
}

TEST_CASE("a silent coordinator is greeted again, and an empty answer paces the next offer",
          "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  h.welcome();
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::WORKER_HELLO, W::REQUEST_WORK});
  // An empty answer that came straight back: the next offer 100 ms after.
  h.now += 10ms;
  h.assignments({});
  h.session.step(h.now);
  CHECK(h.taken().empty());
  CHECK(h.session.next_step() == WorkerSession::Clock::time_point{} + 100ms);
  h.now += 90ms;
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::REQUEST_WORK});
  // Then nothing for the coordinator timeout: a hello.
  h.now += 5s;
  h.session.step(h.now);
  const auto kinds = h.taken();
  CHECK(std::find(kinds.begin(), kinds.end(), W::WORKER_HELLO) != kinds.end());
  CHECK_FALSE(h.session.welcomed());
}

TEST_CASE("a worker whose hello is refused stops, with the reason", "[worker][session]") {
  Harness h;
  h.session.start(h.now);  // the hello is request 1
  CHECK(h.error(ErrorCode::invalid_argument, 1) == Received::refused);
  REQUIRE(h.session.refusal().has_value());
  CHECK(*h.session.refusal() == "said so");
}

TEST_CASE("only an error answering the hello stops the worker", "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  h.welcome();
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::WORKER_HELLO, W::REQUEST_WORK});  // requests 1 and 2
  // The coordinator restarted: the offer is answered "say hello first".
  CHECK(h.error(ErrorCode::failed_precondition, 2) == Received::done);
  CHECK(h.taken() == std::vector{W::WORKER_HELLO});  // request 3
  // An error answering something else while not welcomed is not a refusal.
  CHECK(h.error(ErrorCode::invalid_argument, 2) == Received::error);
  CHECK(h.error(ErrorCode::invalid_argument, 0) == Received::error);
  CHECK_FALSE(h.session.refusal().has_value());
  // A store that is full delays the hello; it does not refuse it.
  CHECK(h.error(ErrorCode::unavailable, 3) == Received::done);
  CHECK_FALSE(h.session.refusal().has_value());
  CHECK(h.error(ErrorCode::failed_precondition, 3) == Received::refused);
}

}  // namespace forktrial::worker

namespace forktrial::worker {

TEST_CASE("a welcome's lease cannot make the worker heartbeat more than every 100 ms",
          "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  CHECK(h.welcome(0) == Received::done);
  h.taken();
  h.session.step(h.now);  // the offer; the first heartbeat is due 100 ms on
  CHECK(h.taken() == std::vector{W::REQUEST_WORK});
  CHECK(h.session.next_step() == h.now + std::chrono::milliseconds(100));
  h.now += std::chrono::milliseconds(99);
  h.session.step(h.now);
  CHECK(h.taken().empty());
  h.now += std::chrono::milliseconds(1);
  h.session.step(h.now);
  CHECK(h.taken() == std::vector{W::HEARTBEAT});
}

}  // namespace forktrial::worker

namespace forktrial::worker {

TEST_CASE("a welcome naming a lease of centuries leaves the heartbeat at its interval",
          "[worker][session]") {
  Harness h;
  h.session.start(h.now);
  CHECK(h.welcome(~std::uint64_t{0}) == Received::done);
  h.session.step(h.now);
  CHECK(h.session.next_step() == h.now + std::chrono::seconds(1));
}

TEST_CASE("a welcomed worker says goodbye once when it stops, and one never welcomed says nothing",
          "[worker][session]") {
  Harness never;
  never.session.start(never.now);
  never.taken();
  CHECK_FALSE(never.session.goodbye("stopped by SIGTERM").has_value());
  CHECK(never.taken().empty());

  Harness h;
  h.session.start(h.now);
  CHECK(h.welcome() == Received::done);
  h.taken();
  const auto request = h.session.goodbye("stopped by SIGTERM");
  REQUIRE(request.has_value());
  REQUIRE(h.sent.size() == 1);
  auto frame = wire::decode(h.sent[0]);
  REQUIRE(frame.has_value());
  REQUIRE(frame->envelope().which() == W::WORKER_GOODBYE);
  CHECK(frame->envelope().getRequestId() == *request);
  CHECK(wire::text(frame->envelope().getWorkerGoodbye().getReason()) == "stopped by SIGTERM");
  h.taken();
  // Said once: the session is done.
  CHECK_FALSE(h.session.goodbye("again").has_value());
  CHECK(h.taken().empty());
}

}  // namespace forktrial::worker
