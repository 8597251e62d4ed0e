// CoordinatorCore: the coordinator's handling of frames without its socket,
// as the fuzz target drives it (fuzz/coordinator_fuzz.cc).
#include <capnp/message.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "coordinator/server.h"
#include "schema/wire_codec.h"
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

std::string status_request(std::uint64_t request, const std::string& job) {
  capnp::MallocMessageBuilder message;
  wire::start(message, request).initStatusRequest().setJob(job);
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
  CHECK(refused->envelope().getError().getCode() == wire::ErrorCode::OUT_OF_ORDER);

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
  CHECK(not_found->envelope().getError().getCode() == wire::ErrorCode::NOT_FOUND);
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
  CHECK(error->envelope().getError().getCode() == wire::ErrorCode::MALFORMED);
}
