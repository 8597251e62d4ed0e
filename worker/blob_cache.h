// The worker's content-addressed blob cache: pack archives and history
// segments fetched from the coordinator, kept under the SHA-256 digest of
// their bytes in an LMDB environment of their own (a directory), bounded by a
// byte cap and evicted least recently used first
// (docs/decisions/0052-worker-blob-cache.md).
//
// Contents survive restarts: reopening the directory finds every blob, with
// its recency as last persisted. Every blob read is hashed again, so bytes
// damaged on disk are never handed out: get() drops them, counts the drop,
// calls the corruption hook and reports a miss, and the caller fetches the
// blob again.
//
// Capacity: bytes_used() is the sum of the stored blobs' sizes (LMDB's page
// overhead is not counted). A put that would exceed the cap first evicts the
// least recently used blobs that are not pinned; when that cannot free enough
// (everything left is pinned), or the blob alone is larger than the cap, the
// put is refused with resource_exhausted, naming the cap and the pinned bytes.
// The LMDB map is sized at twice the cap plus 64 MiB, so freed pages that are
// too scattered for a large blob still leave room; a put that nonetheless
// finds the map full is refused with resource_exhausted as well.
//
// Recency: get(), put() and pin() make a blob the most recently used, in
// memory at once; the new order is written with the next write (a put, a
// drop, flush_recency(), the destructor), never by a read. A crash loses the
// recency of the reads since the last write, not blobs.
//
// Thread-safety: a BlobCache may be used from any number of threads at once.
// get() reads in an LMDB read transaction of its own without taking the
// writers' lock, so gets run concurrently with each other and with a put;
// put(), the drop of a corrupt blob and flush_recency() are serialized by one
// writer mutex (LMDB allows one write transaction at a time anyway). The
// in-memory index (sizes, recency, pins) is guarded by a second mutex that is
// held only for map updates, never across I/O. contains(), missing(),
// summary() and the counters answer from that index.
//
// One BlobCache per directory: the constructor takes an exclusive flock on
// `<dir>/owner.lock` and refuses (unavailable) a directory another BlobCache
// holds, in this process or another (LMDB forbids two handles on one
// environment in a process).
//
// Errors: refusals a caller handles are Status values; failures of the
// environment (I/O, corruption of LMDB itself) throw the Error subclasses of
// store/lmdb.h (LmdbError) and base/unique_fd.h (SystemError).
#pragma once

#include <atomic>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"

namespace forktrial::worker {

struct BlobCacheOptions {
  std::uint64_t byte_cap = 0;  // the most bytes of blobs held; at least 1
  // Fsync each commit. Off only where losing the last writes on a system
  // crash is harmless (tests); LMDB stays consistent either way.
  bool sync = true;
  // Called once for each corrupt blob get() dropped, on the thread that
  // called get(), after the drop and outside the cache's locks, with the
  // digest and what was found. May be empty.
  std::function<void(const Digest&, const std::string& detail)> on_corruption = nullptr;
  // Called once for each blob a put evicted, on the thread that called
  // put(), after the put and outside the cache's locks. May be empty.
  std::function<void(const Digest&)> on_eviction = nullptr;
};

class BlobCache {
 public:
  class Pin;

  // Opens the cache in directory `dir` (created if missing). Throws Error
  // (invalid_argument) for a cap of 0 or above 2^60, Error (unavailable) when
  // another BlobCache holds the directory, LmdbError or SystemError when the
  // environment cannot be opened.
  BlobCache(const std::filesystem::path& dir, std::uint64_t byte_cap);
  BlobCache(const std::filesystem::path& dir, BlobCacheOptions options);
  // Writes the recency of reads not yet persisted (errors are swallowed:
  // recency is advisory).
  ~BlobCache();
  BlobCache(const BlobCache&) = delete;
  BlobCache& operator=(const BlobCache&) = delete;

  // Stores `bytes` under their digest, evicting as described above; storing
  // a blob the cache holds only refreshes its recency. Errors:
  // resource_exhausted (larger than the cap, or the cap cannot be met because
  // of pins, or the LMDB map is full, or the disk holding the cache is full
  // and evicting the blobs no pin holds does not make room: on a full disk a
  // put first evicts, least recently used first, as much as the blob's size,
  // whatever the cap, and tries again).
  std::expected<Digest, Status> put(std::string_view bytes);
  // The same, for bytes that must have digest `expected`; bytes hashing to
  // anything else are refused (invalid_argument) and not stored.
  std::expected<Digest, Status> put(const Digest& expected, std::string_view bytes);

  // A copy of the blob's bytes, verified against `digest`; nullopt when the
  // cache does not hold it or held a corrupt copy (now dropped). The copy is
  // the caller's: nothing the cache does later changes it.
  std::optional<std::string> get(const Digest& digest);

  bool contains(const Digest& digest) const;
  // The digests of `wanted` the cache does not hold, in the order given.
  std::vector<Digest> missing(std::span<const Digest> wanted) const;
  // Every digest held, sorted: what a worker announces in its hello.
  std::vector<Digest> summary() const;
  std::uint64_t bytes_used() const;
  std::uint64_t byte_cap() const { return cap_; }
  // The bytes of held blobs that are pinned now.
  std::uint64_t pinned_bytes() const;
  // Corrupt blobs get() dropped since this BlobCache was opened.
  std::uint64_t corrupt_drops() const { return corrupt_drops_; }

  // Keeps `digest` from eviction while the returned handle lives, and makes
  // it the most recently used. Pins are counted (several holders may pin one
  // digest) and kept in memory only. A digest not held yet may be pinned:
  // pin first, then fetch what missing() reports, and the blob is protected
  // from the moment it is put. The Pin must not outlive the cache.
  Pin pin(const Digest& digest);

  // Writes the recency of reads not yet persisted. Throws LmdbError.
  void flush_recency();

  // A move-only handle keeping one digest pinned until it is destroyed or
  // release()d. Not thread-safe itself (one owner), though handles of one
  // cache may be used and released on any threads.
  class Pin {
   public:
    Pin() = default;
    ~Pin() { release(); }
    Pin(Pin&& other) noexcept;
    Pin& operator=(Pin&& other) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

    const Digest& digest() const { return digest_; }
    explicit operator bool() const { return cache_ != nullptr; }
    void release();

   private:
    friend class BlobCache;
    Pin(BlobCache* cache, const Digest& digest) : cache_(cache), digest_(digest) {}
    BlobCache* cache_ = nullptr;
    Digest digest_;
  };

 private:
  struct Entry {
    std::uint64_t size = 0;
    std::uint64_t tick = 0;  // recency: larger is more recent
  };
  struct Lmdb;  // the environment and its tables (blob_cache.cc)

  // Stores the blob, naming in `evicted` what it evicted to make room.
  std::expected<Digest, Status> store(const Digest& digest, std::string_view bytes,
                                      std::vector<Digest>& evicted);
  // store() with write_mutex_ held; `disk_full`: why the try before failed.
  std::expected<Digest, Status> store_locked(const Digest& digest, std::string_view bytes,
                                             std::vector<Digest>& evicted,
                                             const std::optional<std::string>& disk_full);
  // The disk had no room: tries once more after evicting, or refuses.
  std::expected<Digest, Status> on_full_disk(const Digest& digest, std::string_view bytes,
                                             std::vector<Digest>& evicted,
                                             const std::optional<std::string>& before,
                                             const std::string& why);
  bool evict_for_room(std::uint64_t size, std::vector<Digest>& evicted);
  // store(), then on_eviction_ for each evicted blob, outside every lock.
  std::expected<Digest, Status> store_and_tell(const Digest& digest, std::string_view bytes);
  // Drops `digest` if its stored bytes still do not hash to it.
  void drop_corrupt(const Digest& digest, const std::string& detail);
  void unpin(const Digest& digest);
  // Makes a held blob the most recently used. Requires mutex_.
  void touch_locked(const Digest& digest);
  std::uint64_t pinned_bytes_locked() const;
  // Reads the index, repairing it against the blobs table (an index entry
  // without its blob is removed, a blob without an entry gets one).
  void load_index();

  const std::filesystem::path dir_;
  const std::uint64_t cap_;
  const std::function<void(const Digest&, const std::string&)> on_corruption_;
  const std::function<void(const Digest&)> on_eviction_;
  std::unique_ptr<Lmdb> lmdb_;  // its flock is taken before the environment opens
  std::atomic<std::uint64_t> corrupt_drops_ = 0;

  // Serializes write transactions together with the index updates they
  // imply, so eviction decisions see no other writer. Taken before mutex_.
  std::mutex write_mutex_;

  // The in-memory index, protected by mutex_:
  mutable std::mutex mutex_;
  std::map<Digest, Entry> entries_;             // every blob held
  std::map<std::uint64_t, Digest> by_recency_;  // tick -> digest, least recent first
  std::set<Digest> dirty_;                      // recency newer than the stored index
  std::map<Digest, std::uint32_t> pins_;        // pinned digests and their pin counts
  std::uint64_t next_tick_ = 1;
  std::uint64_t bytes_used_ = 0;
};

}  // namespace forktrial::worker
