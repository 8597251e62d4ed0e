// Whatever a peer sends, decoding a frame gives a message or a WireError the
// receiver can answer with: never a crash, never an unbounded read.
#include "schema/wire_codec.h"

#include <capnp/schema.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

using namespace forktrial;
using forktrial::ErrorCode;

namespace {

std::string hello_frame(std::uint32_t version = schema::wire::K_PROTOCOL_VERSION) {
  capnp::MallocMessageBuilder message;
  auto envelope = wire::start(message, 42);
  envelope.setVersion(version);
  auto hello = envelope.initWorkerHello();
  hello.setWorkerId("w1");
  hello.setSlots(8);
  wire::set_digest(hello.initCached(1)[0], Sha256::of("blob"));
  return wire::encode(message);
}

}  // namespace

TEST_CASE("a frame round-trips its envelope", "[schema][wire]") {
  auto frame = wire::decode(hello_frame());
  REQUIRE(frame);
  auto envelope = frame->envelope();
  CHECK(envelope.getRequestId() == 42);
  REQUIRE(envelope.which() == schema::wire::Envelope::WORKER_HELLO);
  CHECK(wire::text(envelope.getWorkerHello().getWorkerId()) == "w1");
  CHECK(envelope.getWorkerHello().getSlots() == 8);
  CHECK(wire::digest_of(envelope.getWorkerHello().getCached()[0]) == Sha256::of("blob"));
}

TEST_CASE(
    "text that is not UTF-8 is refused naming its path, list elements included, and prose is not",
    "[schema][wire]") {
  {
    capnp::MallocMessageBuilder message;
    auto running = wire::start(message, 1).initHeartbeat().initRunning(3);
    running[0].setJob("j0");
    running[1].setJob("j1");
    running[2].setJob(capnp::Text::Reader("j\xff", 2));
    auto frame = wire::decode(wire::encode(message));
    REQUIRE_FALSE(frame);
    CHECK(
        frame.error().message ==
        "the message's field heartbeat.running[2].job is not valid UTF-8 (byte 0xFF at offset 1)");
  }
  {
    capnp::MallocMessageBuilder message;
    auto hello = wire::start(message, 1).initWorkerHello();
    hello.setWorkerId("w1");
    hello.initWarnings(1).set(0, capnp::Text::Reader("bad \xff", 5));  // prose: repaired later
    CHECK(wire::decode(wire::encode(message)));
    hello.setWorkerId(capnp::Text::Reader("\xc3", 1));
    auto frame = wire::decode(wire::encode(message));
    REQUIRE_FALSE(frame);
    CHECK(frame.error().message ==
          "the message's field workerHello.workerId is not valid UTF-8 (byte 0xC3 at offset 0)");
  }
}

TEST_CASE("messages built one after another, nested, or past the reused buffer encode alike",
          "[schema][wire]") {
  // What a MessageBuilder gives, whatever buffer it built in, is the frame
  // capnp's own builder gives.
  const auto build = [](capnp::MessageBuilder& message, std::size_t text_bytes) {
    auto hello = wire::start(message, 7).initWorkerHello();
    hello.setWorkerId(std::string(text_bytes, 'w'));
    hello.setSlots(3);
    return wire::encode(message);
  };
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{100}, std::size_t{5000},
                                  std::size_t{3} << 20}) {  // the last spills past the buffer
    capnp::MallocMessageBuilder plain;
    const std::string expected = build(plain, bytes);
    for (int round = 0; round < 3; ++round) {  // the buffer reused: zeroed again each time
      wire::MessageBuilder outer;
      {
        wire::MessageBuilder inner;  // while the outer holds the buffer
        CHECK(build(inner, bytes) == expected);
      }
      CHECK(build(outer, bytes) == expected);
    }
    auto frame = wire::decode(expected, std::size_t{16} << 20);
    REQUIRE(frame);
    CHECK(frame->envelope().getWorkerHello().getWorkerId().size() == bytes);
  }
}

TEST_CASE("a frame from another protocol version is refused by name", "[schema][wire]") {
  auto frame = wire::decode(hello_frame(7));
  REQUIRE_FALSE(frame);
  CHECK(frame.error().code == ErrorCode::invalid_argument);
  CHECK(frame.error().message == "the message speaks protocol version 7; this is " +
                                     std::to_string(schema::wire::K_PROTOCOL_VERSION));
}

TEST_CASE("frames that are not messages are refused", "[schema][wire]") {
  auto empty = wire::decode("");
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == ErrorCode::invalid_argument);
  auto odd = wire::decode(std::string(13, 'x'));
  REQUIRE_FALSE(odd);
  CHECK(odd.error().code == ErrorCode::invalid_argument);
  auto trailing = wire::decode(hello_frame() + std::string(8, '\0'));
  REQUIRE_FALSE(trailing);
  CHECK(trailing.error().message == "the frame has bytes after its message");
  auto huge = wire::decode(std::string(1 << 20, '\0'), 1 << 16);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().code == ErrorCode::resource_exhausted);
}

TEST_CASE("random bytes and every truncation of a frame are refused or read, never crash",
          "[schema][wire]") {
  std::mt19937_64 random(20261130);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(8 * (1 + random() % 64), '\0');
    for (auto& c : bytes) c = static_cast<char>(random());
    auto frame = wire::decode(bytes);
    if (frame) {
      // Whatever it holds reads within the traversal limit, or throws a
      // kj::Exception the receiver turns into an error reply.
      try {
        (void)frame->envelope().which();
      } catch (const kj::Exception&) {
      }
    }
  }
  const std::string good = hello_frame();
  for (std::size_t cut = 0; cut < good.size(); cut += 8) {
    auto frame = wire::decode(good.substr(0, cut));
    CHECK_FALSE(frame);
  }
}

TEST_CASE("an error frame names its code and message", "[schema][wire]") {
  auto frame = wire::decode(wire::error_frame(9, Status{ErrorCode::not_found, "no such job"}));
  REQUIRE(frame);
  REQUIRE(frame->envelope().which() == schema::wire::Envelope::ERROR);
  CHECK(frame->envelope().getError().getCode() == schema::wire::ErrorCode::NOT_FOUND);
  CHECK(wire::status_of(frame->envelope().getError()) ==
        Status{ErrorCode::not_found, "no such job"});
  CHECK(frame->envelope().getRequestId() == 9);
}

TEST_CASE("the wire's error codes are forktrial's categories, one to one and in order",
          "[schema][wire]") {
  const auto enumerants = capnp::Schema::from<schema::wire::ErrorCode>().getEnumerants();
  REQUIRE(enumerants.size() == kErrorCodes.size());
  for (unsigned i = 0; i < enumerants.size(); ++i) {
    const std::string camel = enumerants[i].getProto().getName().cStr();
    std::string snake;
    for (const char c : camel) {
      if (c >= 'A' && c <= 'Z') {
        snake += '_';
        snake += static_cast<char>(c - 'A' + 'a');
      } else {
        snake += c;
      }
    }
    INFO(camel);
    CHECK(error_code_name(kErrorCodes[i]) == snake);
    CHECK(static_cast<unsigned>(wire::wire_code(kErrorCodes[i])) == i);
  }
}

TEST_CASE("an error code past the last this build knows reads as internal, saying so",
          "[schema][wire]") {
  capnp::MallocMessageBuilder builder;
  auto error = wire::start(builder, 3).initError();
  error.setCode(static_cast<schema::wire::ErrorCode>(42));
  error.setMessage("from the future");
  auto frame = wire::decode(wire::encode(builder));
  REQUIRE(frame);
  const Status status = wire::status_of(frame->envelope().getError());
  CHECK(status.code == ErrorCode::internal);
  CHECK(status.message == "error code 42, which this build does not know: from the future");
}

TEST_CASE("a goodbye is a worker's message, and its reason is prose: repaired, not refused",
          "[schema][wire]") {
  using schema::wire::Envelope;
  CHECK(wire::is_worker_message(Envelope::WORKER_GOODBYE));
  CHECK(wire::is_prose_field("WorkerGoodbye", "reason"));
  capnp::MallocMessageBuilder builder;
  const std::string reason = "stopped by \xFFSIGTERM";
  wire::start(builder, 5)
      .initWorkerGoodbye()
      .setReason(capnp::Text::Reader(reason.data(), reason.size()));
  auto frame = wire::decode(wire::encode(builder));
  REQUIRE(frame);
  REQUIRE(frame->envelope().which() == Envelope::WORKER_GOODBYE);
  CHECK(wire::prose(frame->envelope().getWorkerGoodbye().getReason(), 1024) ==
        "stopped by \uFFFDSIGTERM");
}

TEST_CASE("an arm past the last this build knows is refused, saying so", "[schema][wire]") {
  capnp::MallocMessageBuilder builder;
  wire::start(builder, 6).initWorkerGoodbye();
  std::string frame = wire::encode(builder);
  // The union's tag follows the version in the envelope's data, after the
  // segment table and the root pointer: one past workerGoodbye's.
  const std::uint16_t next = static_cast<std::uint16_t>(schema::wire::Envelope::WORKER_GOODBYE) + 1;
  std::memcpy(frame.data() + 20, &next, sizeof next);
  auto decoded = wire::decode(frame);
  REQUIRE_FALSE(decoded);
  CHECK(decoded.error().code == ErrorCode::invalid_argument);
  CHECK(decoded.error().message ==
        "message arm " + std::to_string(next) + " is not one this peer knows");
}
