// The worker's blob cache: contents across restarts, LRU eviction under the
// cap and pins, refusals, corruption detected on read, and concurrent use.
#include "worker/blob_cache.h"

#include <lmdb.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "store/lmdb.h"
#include "tests/support/skip.h"
#include "tests/support/small_disk.h"
#include "tests/support/temp_dir.h"

using forktrial::Digest;
using forktrial::ErrorCode;
using forktrial::Sha256;
using forktrial::testing::TempDir;
using forktrial::worker::BlobCache;
using forktrial::worker::BlobCacheOptions;
namespace lmdb = forktrial::store::lmdb;

namespace {

std::string blob(char fill, std::size_t size) {
  return std::string(size, fill);
}

Digest put_ok(BlobCache& cache, std::string_view bytes) {
  const auto digest = cache.put(bytes);
  INFO((digest ? std::string() : digest.error().message));
  REQUIRE(digest.has_value());
  CHECK(*digest == Sha256::of(bytes));
  return *digest;
}

// Overwrites the stored value of `digest` in the closed cache at `dir`.
void damage(const std::filesystem::path& dir, const Digest& digest, std::string_view garbage) {
  lmdb::Env env;
  lmdb::check(mdb_env_set_maxdbs(env.get(), 2), "mdb_env_set_maxdbs");
  lmdb::check(mdb_env_set_mapsize(env.get(), std::size_t{256} << 20), "mdb_env_set_mapsize");
  lmdb::check(mdb_env_open(env.get(), dir.c_str(), 0, 0644), "mdb_env_open");
  lmdb::Txn txn(env.get(), 0);
  MDB_dbi blobs = 0;
  lmdb::check(mdb_dbi_open(txn.get(), "blobs", 0, &blobs), "mdb_dbi_open(blobs)");
  const std::string_view key(reinterpret_cast<const char*>(digest.bytes().data()), Digest::kSize);
  REQUIRE(txn.get(blobs, lmdb::val(key)).has_value());
  txn.put(blobs, lmdb::val(key), lmdb::val(garbage));
  txn.commit();
}

}  // namespace

TEST_CASE("a put blob is returned by get and counted", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path() / "cache", 1000);
  const Digest a = put_ok(cache, "alpha");
  const Digest b = put_ok(cache, "");
  CHECK(cache.get(a) == "alpha");
  CHECK(cache.get(b) == "");
  CHECK(cache.contains(a));
  CHECK(cache.bytes_used() == 5);
  const Digest absent = Sha256::of("absent");
  CHECK_FALSE(cache.get(absent).has_value());
  CHECK_FALSE(cache.contains(absent));
  const std::vector<Digest> wanted = {absent, a, b};
  CHECK(cache.missing(wanted) == std::vector<Digest>{absent});
  std::vector<Digest> held = {a, b};
  std::sort(held.begin(), held.end());
  CHECK(cache.summary() == held);

  // Storing it again changes nothing.
  put_ok(cache, "alpha");
  CHECK(cache.bytes_used() == 5);
}

TEST_CASE("a put with an expected digest refuses other bytes", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 1000);
  const Digest expected = Sha256::of("good");
  CHECK(cache.put(expected, "good") == expected);
  const Digest other = Sha256::of("other");
  const auto refused = cache.put(other, "evil");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message == "the 4 bytes given for blob " + other.str() + " hash to " +
                                       Sha256::of("evil").str() + "; nothing was stored");
  CHECK_FALSE(cache.contains(other));
  CHECK_FALSE(cache.contains(Sha256::of("evil")));
}

TEST_CASE("the cache keeps its blobs and their recency across a restart", "[worker][cache]") {
  TempDir dir;
  Digest a, b, c;
  {
    BlobCache cache(dir.path(), 300);
    a = put_ok(cache, blob('a', 100));
    b = put_ok(cache, blob('b', 100));
    c = put_ok(cache, blob('c', 100));
    // Only a read: its recency is persisted when the cache closes.
    CHECK(cache.get(a).has_value());
  }
  BlobCache cache(dir.path(), 300);
  CHECK(cache.bytes_used() == 300);
  CHECK(cache.get(b) == blob('b', 100));
  CHECK(cache.missing(std::vector<Digest>{a, b, c}).empty());
  // b was just read and a read before the restart: c is the oldest.
  put_ok(cache, blob('d', 100));
  CHECK_FALSE(cache.contains(c));
  CHECK(cache.contains(a));
  CHECK(cache.contains(b));
}

TEST_CASE("a second cache on the same directory is refused", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 100);
  try {
    BlobCache second(dir.path(), 100);
    FAIL("the second cache opened");
  } catch (const forktrial::Error& e) {
    CHECK(e.code() == ErrorCode::unavailable);
    CHECK(std::string(e.what()) ==
          "the blob cache at " + dir.path().string() +
              " is open in another BlobCache, in this process or another; share that one");
  }
}

TEST_CASE("eviction removes the least recently used blobs first", "[worker][cache]") {
  TempDir dir;
  std::vector<Digest> evicted;
  BlobCache cache(dir.path(),
                  BlobCacheOptions{.byte_cap = 400,
                                   .on_eviction = [&](const Digest& d) { evicted.push_back(d); }});
  const Digest a = put_ok(cache, blob('a', 100));
  const Digest b = put_ok(cache, blob('b', 100));
  const Digest c = put_ok(cache, blob('c', 100));
  const Digest d = put_ok(cache, blob('d', 100));
  // Use order now: b, c, d, a (oldest first); then a pin makes c recent.
  CHECK(cache.get(a).has_value());
  { auto pin = cache.pin(c); }
  // Order: b, d, a, c.
  CHECK(evicted.empty());
  const Digest e = put_ok(cache, blob('e', 100));
  CHECK_FALSE(cache.contains(b));
  CHECK(cache.bytes_used() == 400);
  CHECK(evicted == std::vector<Digest>{b});
  // Two at once for a larger blob: d and a go, c stays.
  const Digest f = put_ok(cache, blob('f', 200));
  CHECK_FALSE(cache.contains(d));
  CHECK_FALSE(cache.contains(a));
  CHECK(cache.contains(c));
  CHECK(cache.contains(e));
  CHECK(cache.contains(f));
  CHECK(cache.bytes_used() == 400);
  CHECK(evicted == std::vector<Digest>{b, d, a});
  CHECK_FALSE(cache.get(b).has_value());  // gone from LMDB too
}

TEST_CASE("the owner hears of each eviction after the put, outside the cache's locks",
          "[worker][cache]") {
  TempDir dir;
  std::vector<Digest> heard;
  BlobCache* self = nullptr;
  BlobCache cache(dir.path(),
                  BlobCacheOptions{.byte_cap = 200, .on_eviction = [&](const Digest& digest) {
                                     heard.push_back(digest);
                                     // Takes the cache's write lock: no deadlock.
                                     self->flush_recency();
                                     CHECK_FALSE(self->contains(digest));
                                   }});
  self = &cache;
  const Digest a = put_ok(cache, blob('a', 100));
  const Digest b = put_ok(cache, blob('b', 100));
  CHECK(heard.empty());
  put_ok(cache, blob('c', 200));
  CHECK(heard == std::vector<Digest>{a, b});
}

TEST_CASE("a pinned blob is never evicted, and is once its pin is released", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 200);
  const Digest a = put_ok(cache, blob('a', 100));
  auto pin = cache.pin(a);
  CHECK(pin.digest() == a);
  const Digest b = put_ok(cache, blob('b', 100));
  CHECK(cache.pinned_bytes() == 100);
  // a is the least recently used, but pinned: b goes instead.
  const Digest c = put_ok(cache, blob('c', 100));
  CHECK(cache.contains(a));
  CHECK_FALSE(cache.contains(b));
  {
    // Two pins on one digest: releasing one keeps it pinned.
    auto second = cache.pin(a);
    auto moved = std::move(second);
    CHECK_FALSE(second);
  }
  put_ok(cache, blob('d', 100));
  CHECK(cache.contains(a));
  CHECK_FALSE(cache.contains(c));

  pin.release();
  CHECK(cache.pinned_bytes() == 0);
  put_ok(cache, blob('e', 100));
  CHECK_FALSE(cache.contains(a));
}

TEST_CASE("a digest pinned before it is fetched is protected once put", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 200);
  const std::string wanted = blob('w', 100);
  auto pin = cache.pin(Sha256::of(wanted));
  CHECK(cache.missing(std::vector<Digest>{pin.digest()}) == std::vector<Digest>{pin.digest()});
  put_ok(cache, wanted);
  put_ok(cache, blob('x', 100));
  put_ok(cache, blob('y', 100));
  CHECK(cache.contains(pin.digest()));
}

TEST_CASE("a put the pins leave no room for is refused with the cap and pinned bytes",
          "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 250);
  const Digest a = put_ok(cache, blob('a', 100));
  const Digest b = put_ok(cache, blob('b', 100));
  auto pin_a = cache.pin(a);
  auto pin_b = cache.pin(b);
  const std::string c = blob('c', 100);
  const auto refused = cache.put(c);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource_exhausted);
  CHECK(refused.error().message ==
        "cannot store blob " + Sha256::of(c).str() +
            " of 100 bytes: the blob cache's cap is 250 bytes, 200 bytes are held and 200 bytes "
            "of them are pinned by assigned or running trials; release pins or raise the cap");
  // Nothing was evicted for the refused put.
  CHECK(cache.contains(a));
  CHECK(cache.contains(b));
  CHECK(cache.bytes_used() == 200);
  pin_b.release();
  put_ok(cache, c);
  CHECK_FALSE(cache.contains(b));
}

TEST_CASE("a blob larger than the cap is refused", "[worker][cache]") {
  TempDir dir;
  BlobCache cache(dir.path(), 100);
  const auto refused = cache.put(blob('x', 101));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource_exhausted);
  CHECK(refused.error().message ==
        "a blob of 101 bytes is larger than the blob cache's cap of 100 bytes");
  const std::string big = blob('y', 101);
  const auto expected = cache.put(Sha256::of(big), big);
  REQUIRE_FALSE(expected.has_value());
  CHECK(expected.error().code == ErrorCode::resource_exhausted);
  CHECK(cache.bytes_used() == 0);
  // Exactly the cap fits.
  put_ok(cache, blob('z', 100));
}

TEST_CASE("a blob damaged on disk is reported as a miss and dropped", "[worker][cache]") {
  TempDir dir;
  Digest a, b;
  {
    BlobCache cache(dir.path(), 1000);
    a = put_ok(cache, "the original bytes");
    b = put_ok(cache, "untouched");
  }
  std::string garbage;
  SECTION("same length") {
    garbage = "THE ORIGINAL BYTES";
  }
  SECTION("truncated") {
    garbage = "the orig";
  }
  damage(dir.path(), a, garbage);

  std::vector<std::pair<Digest, std::string>> reports;
  BlobCache cache(dir.path(), BlobCacheOptions{
                                  .byte_cap = 1000,
                                  .on_corruption =
                                      [&](const Digest& digest, const std::string& detail) {
                                        reports.emplace_back(digest, detail);
                                      },
                              });
  CHECK(cache.contains(a));  // not known until read
  CHECK_FALSE(cache.get(a).has_value());
  CHECK(cache.corrupt_drops() == 1);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].first == a);
  CHECK(reports[0].second == "the " + std::to_string(garbage.size()) + " bytes stored under " +
                                 a.str() + " hash to " + Sha256::of(garbage).str());
  CHECK_FALSE(cache.contains(a));
  CHECK(cache.missing(std::vector<Digest>{a, b}) == std::vector<Digest>{a});
  CHECK(cache.bytes_used() == 9);
  CHECK_FALSE(cache.get(a).has_value());
  CHECK(cache.corrupt_drops() == 1);  // the second read finds nothing
  CHECK(cache.get(b) == "untouched");

  // Fetched again, it is stored again.
  put_ok(cache, "the original bytes");
  CHECK(cache.get(a) == "the original bytes");
}

TEST_CASE("puts, gets and pins from several threads keep the cache consistent", "[worker][cache]") {
  TempDir dir;
  constexpr std::size_t kBlob = 1000;
  BlobCache cache(dir.path(), BlobCacheOptions{.byte_cap = 20 * kBlob, .sync = false});
  constexpr int kThreads = 4;
  constexpr int kRounds = 60;
  std::atomic<int> wrong_bytes = 0;
  std::atomic<int> lost_pinned = 0;
  std::atomic<int> refused = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const std::string bytes = std::to_string(t) + ":" + std::to_string(round) +
                                  std::string(kBlob - 8, static_cast<char>('a' + t));
        // Pinned before the put, as a trial's inputs are: never evicted.
        auto pin = cache.pin(Sha256::of(bytes));
        const auto digest = cache.put(bytes);
        if (!digest) {
          ++refused;
          continue;
        }
        for (int look = 0; look <= round; look += 7) {
          const std::string other =
              std::to_string((t + 1) % kThreads) + ":" + std::to_string(look) +
              std::string(kBlob - 8, static_cast<char>('a' + (t + 1) % kThreads));
          const auto got = cache.get(Sha256::of(other));
          if (got && *got != other) ++wrong_bytes;
        }
        if (cache.get(*digest) != bytes) ++lost_pinned;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(wrong_bytes == 0);
  CHECK(lost_pinned == 0);
  CHECK(refused == 0);
  CHECK(cache.bytes_used() <= cache.byte_cap());
  CHECK(cache.pinned_bytes() == 0);
  CHECK(cache.corrupt_drops() == 0);
  // The index agrees with what get finds.
  std::uint64_t found = 0;
  for (const Digest& digest : cache.summary()) {
    const auto bytes = cache.get(digest);
    REQUIRE(bytes.has_value());
    found += bytes->size();
  }
  CHECK(found == cache.bytes_used());
}

TEST_CASE("on a full disk the cache evicts to make room, and refuses when pins hold it all",
          "[worker][cache]") {
  if (auto why = forktrial::testing::SmallDisk::unavailable()) {
    forktrial::testing::skip(*why);
    return;
  }
  TempDir dir;
  forktrial::testing::SmallDisk disk(dir.path() / "disk", "12m");
  if (!disk.mounted()) {
    forktrial::testing::skip("mount -t tmpfs failed");
    return;
  }
  std::vector<Digest> evictions;
  BlobCacheOptions options;
  options.byte_cap = std::uint64_t{1} << 30;  // far more than the disk holds
  options.sync = false;
  options.on_eviction = [&](const Digest& digest) { evictions.push_back(digest); };
  BlobCache cache(disk.path() / "cache", options);
  // Thirty blobs of 1 MiB on a disk of 12: the disk fills long before the
  // cap, and each put past that point evicts the oldest.
  std::vector<Digest> digests;
  for (int i = 0; i < 30; ++i) {
    digests.push_back(put_ok(cache, blob(static_cast<char>('a' + i), std::size_t{1} << 20)));
  }
  CHECK(evictions.size() > 10);
  CHECK(cache.contains(digests.back()));
  CHECK_FALSE(cache.contains(digests.front()));
  CHECK(cache.get(digests.back()) == blob(static_cast<char>('a' + 29), std::size_t{1} << 20));
  // Every blob held is pinned (by trials): nothing may go, and a new blob is
  // refused, saying why.
  std::vector<BlobCache::Pin> pins;
  for (const Digest& digest : cache.summary()) pins.push_back(cache.pin(digest));
  const auto refused = cache.put(blob('#', std::size_t{1} << 20));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource_exhausted);
  CHECK_THAT(refused.error().message, Catch::Contains("the disk holding the cache at"));
  CHECK_THAT(refused.error().message, Catch::Contains("pinned by assigned or running trials"));
  for (const Digest& digest : cache.summary()) CHECK(cache.get(digest).has_value());
}
