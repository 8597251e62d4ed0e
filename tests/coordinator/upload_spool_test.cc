// Uploads spilled to disk, bounded per client and overall, dropped when
// abandoned: in virtual time.
#include "coordinator/upload_spool.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/coordinator/scheduler_support.h"
#include "tests/support/temp_dir.h"

using namespace forktrial;
using namespace forktrial::coordinator;
using forktrial::coordinator::testing::at;
using forktrial::testing::TempDir;

namespace {

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::size_t files_in(const std::filesystem::path& dir) {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                                std::filesystem::directory_iterator()));
}

}  // namespace

TEST_CASE("an upload spills to a file, hashed as it comes, and is handed over whole",
          "[coordinator][uploads]") {
  TempDir dir;
  const auto spool_dir = dir.path() / "uploads";
  std::filesystem::create_directories(spool_dir);
  dir.write("uploads/7.part", "left by a process before");
  UploadSpool spool(spool_dir);
  CHECK(files_in(spool_dir) == 0);  // leftovers are removed
  const std::string blob = "0123456789";
  const Digest digest = Sha256::of(blob);
  auto first = spool.add("c1", digest, 10, 0, bytes_of("01234"), at(0));
  REQUIRE(first);
  CHECK_FALSE(first->has_value());
  CHECK(spool.uploads() == 1);
  CHECK(spool.declared_bytes() == 10);
  CHECK(files_in(spool_dir) == 1);
  auto last = spool.add("c1", digest, 10, 5, bytes_of("56789"), at(1));
  REQUIRE(last);
  REQUIRE(last->has_value());
  std::ifstream in(**last, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == blob);
  CHECK(spool.uploads() == 0);
  CHECK(spool.declared_bytes() == 0);
  spool.done(**last);
  CHECK(files_in(spool_dir) == 0);

  // Bytes that do not hash to the digest are refused, and nothing is kept.
  auto wrong = spool.add("c1", Sha256::of("other"), 10, 0, bytes_of(blob), at(2));
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code == forktrial::ErrorCode::invalid_argument);
  CHECK(files_in(spool_dir) == 0);
  // A chunk out of order drops its upload.
  REQUIRE(spool.add("c1", digest, 10, 0, bytes_of("012"), at(3)));
  auto gap = spool.add("c1", digest, 10, 5, bytes_of("56789"), at(3));
  REQUIRE_FALSE(gap);
  CHECK(gap.error().code == forktrial::ErrorCode::failed_precondition);
  CHECK(spool.uploads() == 0);
  CHECK(files_in(spool_dir) == 0);
}

TEST_CASE("a client's uploads in progress are bounded, and so are everyone's",
          "[coordinator][uploads]") {
  TempDir dir;
  UploadLimits limits;
  limits.max_blob = 100;
  limits.per_client = 150;
  limits.overall = 250;
  limits.per_client_uploads = 3;
  UploadSpool spool(dir.path() / "uploads", limits);
  auto start = [&](const std::string& client, int n, std::uint64_t total) {
    return spool.add(client, Sha256::of(client + std::to_string(n)), total, 0, bytes_of("x"),
                     at(0));
  };
  auto too_big = start("a", 0, 101);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code == forktrial::ErrorCode::resource_exhausted);
  CHECK(too_big.error().message == "a blob of 101 bytes is over the limit of 100 bytes");
  REQUIRE(start("a", 1, 100));
  auto past_share = start("a", 2, 60);  // 160 declared: over its 150
  REQUIRE_FALSE(past_share);
  CHECK(past_share.error().code == forktrial::ErrorCode::resource_exhausted);
  CHECK_THAT(past_share.error().message,
             Catch::StartsWith("this client has 1 uploads in progress, of 100 bytes"));
  REQUIRE(start("a", 3, 10));
  REQUIRE(start("a", 4, 10));
  auto too_many = start("a", 5, 1);  // a fourth
  REQUIRE_FALSE(too_many);
  CHECK(too_many.error().code == forktrial::ErrorCode::resource_exhausted);
  // Other clients have their own share, within the overall limit.
  REQUIRE(start("b", 1, 100));
  auto full = start("c", 1, 40);  // 120 + 100 + 40 > 250
  REQUIRE_FALSE(full);
  CHECK(full.error().code == forktrial::ErrorCode::unavailable);
  CHECK_THAT(full.error().message, Catch::EndsWith("send this again later"));
  CHECK(spool.declared_bytes() == 220);
}

TEST_CASE("an abandoned upload is dropped after its idle timeout, file and all",
          "[coordinator][uploads]") {
  TempDir dir;
  UploadLimits limits;
  limits.idle_timeout = Duration{60'000};
  const auto spool_dir = dir.path() / "uploads";
  UploadSpool spool(spool_dir, limits);
  const std::string blob(100, 'b');
  const Digest abandoned = Sha256::of("never finished");
  const Digest going = Sha256::of(blob);
  REQUIRE(spool.add("c", abandoned, 1000, 0, bytes_of(std::string(10, 'a')), at(0)));
  REQUIRE(spool.add("c", going, 100, 0, bytes_of(blob.substr(0, 50)), at(0)));
  REQUIRE(spool.add("c", going, 100, 50, bytes_of(blob.substr(50, 10)), at(59'000)));
  CHECK(spool.expire(at(59'999)).empty());
  const auto dropped = spool.expire(at(60'000));
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0] ==
        "dropped an upload of " + abandoned.str() + " abandoned after 10 bytes of 1000 bytes");
  CHECK(spool.uploads() == 1);
  CHECK(files_in(spool_dir) == 1);
  auto finished = spool.add("c", going, 100, 60, bytes_of(blob.substr(60)), at(100'000));
  REQUIRE(finished);
  REQUIRE(finished->has_value());
  spool.done(**finished);
  CHECK(files_in(spool_dir) == 0);
}
