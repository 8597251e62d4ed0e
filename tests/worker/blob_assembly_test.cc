// Chunked assembly of a blob: the happy paths and one test per refusal.
#include "worker/blob_assembly.h"

#include <catch2/catch.hpp>

using forktrial::Digest;
using forktrial::ErrorCode;
using forktrial::Sha256;
using forktrial::worker::BlobAssembly;

namespace {

constexpr std::size_t kChunk = BlobAssembly::kMaxChunk;

BlobAssembly start(std::string_view bytes) {
  auto assembly = BlobAssembly::start(Sha256::of(bytes), bytes.size(), 64 << 20);
  REQUIRE(assembly.has_value());
  return std::move(*assembly);
}

std::string pattern(std::size_t size) {
  std::string out(size, '\0');
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  return out;
}

}  // namespace

TEST_CASE("chunks in any order assemble the blob", "[worker][assembly]") {
  const std::string bytes = pattern(2 * kChunk + 123);
  BlobAssembly assembly = start(bytes);
  REQUIRE(assembly.add(2 * kChunk, std::string_view(bytes).substr(2 * kChunk)).has_value());
  CHECK_FALSE(assembly.complete());
  REQUIRE(assembly.add(0, std::string_view(bytes).substr(0, kChunk)).has_value());
  CHECK(assembly.received() == kChunk + 123);
  REQUIRE(assembly.add(kChunk, std::string_view(bytes).substr(kChunk, kChunk)).has_value());
  CHECK(assembly.complete());
  const auto done = std::move(assembly).finish();
  REQUIRE(done.has_value());
  CHECK(*done == bytes);
}

TEST_CASE("a repeated or overlapping chunk with the same bytes is accepted", "[worker][assembly]") {
  const std::string bytes = pattern(100);
  BlobAssembly assembly = start(bytes);
  REQUIRE(assembly.add(10, std::string_view(bytes).substr(10, 30)).has_value());
  REQUIRE(assembly.add(10, std::string_view(bytes).substr(10, 30)).has_value());
  REQUIRE(assembly.add(60, std::string_view(bytes).substr(60, 40)).has_value());
  // Spans the gap and overlaps both ranges.
  REQUIRE(assembly.add(0, std::string_view(bytes).substr(0, 70)).has_value());
  CHECK(assembly.received() == 100);
  CHECK(std::move(assembly).finish() == bytes);
}

TEST_CASE("an empty blob is complete at once", "[worker][assembly]") {
  BlobAssembly assembly = start("");
  CHECK(assembly.complete());
  CHECK(std::move(assembly).finish() == "");
}

TEST_CASE("a chunk that disagrees with bytes received before is refused", "[worker][assembly]") {
  const std::string bytes = pattern(100);
  BlobAssembly assembly = start(bytes);
  REQUIRE(assembly.add(0, std::string_view(bytes).substr(0, 50)).has_value());
  std::string changed = bytes.substr(40, 20);
  changed[5] ^= 1;
  const auto refused = assembly.add(40, changed);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message == "chunk of blob " + Sha256::of(bytes).str() +
                                       " at offset 40 (20 bytes) disagrees with the bytes already "
                                       "received for [40, 50)");
  // Nothing of it was taken.
  CHECK(assembly.received() == 50);
  REQUIRE(assembly.add(50, std::string_view(bytes).substr(50)).has_value());
  CHECK(std::move(assembly).finish() == bytes);
}

TEST_CASE("a chunk out of the blob's range is refused", "[worker][assembly]") {
  const std::string bytes = pattern(100);
  BlobAssembly assembly = start(bytes);
  const std::string prefix = "chunk of blob " + Sha256::of(bytes).str();
  auto past = assembly.add(90, pattern(11));
  REQUIRE_FALSE(past.has_value());
  CHECK(past.error().message == prefix + " at offset 90 (11 bytes) ends past the blob's 100 bytes");
  // An offset near 2^64 must not wrap.
  auto wrapped = assembly.add(~std::uint64_t{0} - 2, pattern(10));
  REQUIRE_FALSE(wrapped.has_value());
  CHECK(wrapped.error().code == ErrorCode::invalid_argument);
  CHECK(assembly.received() == 0);
}

TEST_CASE("an empty or oversized chunk is refused", "[worker][assembly]") {
  const std::string bytes = pattern(kChunk + 10);
  BlobAssembly assembly = start(bytes);
  const std::string prefix = "chunk of blob " + Sha256::of(bytes).str();
  auto empty = assembly.add(0, "");
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().message == prefix + " at offset 0 (0 bytes) is empty");
  auto big = assembly.add(0, std::string_view(bytes).substr(0, kChunk + 1));
  REQUIRE_FALSE(big.has_value());
  CHECK(big.error().code == ErrorCode::invalid_argument);
  CHECK(big.error().message == prefix +
                                   " at offset 0 (1048577 bytes) is larger than the chunk "
                                   "limit of 1048576 bytes");
}

TEST_CASE("a blob announced larger than the limit is refused", "[worker][assembly]") {
  const Digest digest = Sha256::of("x");
  const auto refused = BlobAssembly::start(digest, 1001, 1000);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource_exhausted);
  CHECK(refused.error().message ==
        "blob " + digest.str() + " announced as 1001 bytes exceeds the limit of 1000 bytes");
}

TEST_CASE("an incomplete assembly yields no bytes", "[worker][assembly]") {
  const std::string bytes = pattern(100);
  BlobAssembly assembly = start(bytes);
  REQUIRE(assembly.add(0, std::string_view(bytes).substr(0, 30)).has_value());
  REQUIRE(assembly.add(60, std::string_view(bytes).substr(60)).has_value());
  const auto refused = std::move(assembly).finish();
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::failed_precondition);
  CHECK(refused.error().message == "blob " + Sha256::of(bytes).str() +
                                       " is incomplete: 70 of 100 bytes received, the first "
                                       "missing at offset 30");
}

TEST_CASE("assembled bytes that do not match the digest are refused", "[worker][assembly]") {
  const Digest expected = Sha256::of("expected");
  auto assembly = BlobAssembly::start(expected, 8, 100);
  REQUIRE(assembly.has_value());
  REQUIRE(assembly->add(0, "imposter").has_value());
  const auto refused = std::move(*assembly).finish();
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message == "the 8 bytes assembled for blob " + expected.str() +
                                       " hash to " + Sha256::of("imposter").str() +
                                       "; fetch it again");
}
