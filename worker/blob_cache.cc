#include "worker/blob_cache.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/file.h>

#include <cstring>

#include "base/unique_fd.h"
#include "store/lmdb.h"

namespace forktrial::worker {

namespace lmdb = store::lmdb;

namespace {

constexpr std::uint64_t kMaxCap = std::uint64_t{1} << 60;
constexpr std::uint64_t kMapSlack = std::uint64_t{64} << 20;
constexpr std::size_t kIndexValueSize = 16;  // be64 size, be64 tick

MDB_val key_of(const Digest& digest) {
  return MDB_val{Digest::kSize, const_cast<std::uint8_t*>(digest.bytes().data())};
}

std::optional<Digest> digest_of(const MDB_val& key) {
  if (key.mv_size != Digest::kSize) return std::nullopt;
  std::array<std::uint8_t, Digest::kSize> raw{};
  std::memcpy(raw.data(), key.mv_data, Digest::kSize);
  return Digest(raw);
}

void put_be64(unsigned char* out, std::uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(value & 0xff);
    value >>= 8;
  }
}

std::uint64_t get_be64(const unsigned char* in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | in[i];
  return value;
}

std::string bytes_text(std::uint64_t bytes) {
  return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

}  // namespace

// The environment, opened after the directory's flock is held; the lock is
// released after the environment is closed (members end in reverse order).
struct BlobCache::Lmdb {
  UniqueFd owner_lock;
  lmdb::Env env;
  MDB_dbi blobs = 0;  // digest (32 raw bytes) -> the blob's bytes
  MDB_dbi index = 0;  // digest -> be64 size, be64 recency tick

  void write_index(lmdb::Txn& txn, const Digest& digest, std::uint64_t size, std::uint64_t tick) {
    unsigned char value[kIndexValueSize];
    put_be64(value, size);
    put_be64(value + 8, tick);
    txn.put(index, key_of(digest), MDB_val{sizeof value, value});
  }

  void remove(lmdb::Txn& txn, const Digest& digest) {
    for (MDB_dbi dbi : {blobs, index}) remove_from(txn, dbi, digest);
  }

  void remove_from(lmdb::Txn& txn, MDB_dbi dbi, const Digest& digest) {
    MDB_val key = key_of(digest);
    const int rc = mdb_del(txn.get(), dbi, &key, nullptr);
    if (rc != MDB_NOTFOUND) lmdb::check(rc, "mdb_del");
  }
};

BlobCache::BlobCache(const std::filesystem::path& dir, std::uint64_t byte_cap)
    : BlobCache(dir, BlobCacheOptions{.byte_cap = byte_cap}) {}

BlobCache::BlobCache(const std::filesystem::path& dir, BlobCacheOptions options)
    : dir_(dir),
      cap_(options.byte_cap),
      on_corruption_(std::move(options.on_corruption)),
      on_eviction_(std::move(options.on_eviction)),
      lmdb_(std::make_unique<Lmdb>()) {
  if (cap_ == 0 || cap_ > kMaxCap) {
    throw Error(ErrorCode::invalid_argument, "blob cache " + dir.string() + ": a byte cap of " +
                                                 std::to_string(cap_) + " is out of range (1 to " +
                                                 std::to_string(kMaxCap) + ")");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error(ErrorCode::internal,
                "cannot create the blob cache directory " + dir.string() + ": " + ec.message());
  }
  const std::filesystem::path lock = dir / "owner.lock";
  lmdb_->owner_lock = UniqueFd(retry_eintr(
      [&] { return ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644); }));
  if (!lmdb_->owner_lock) throw SystemError("open(\"" + lock.string() + "\")", errno);
  if (retry_eintr([&] { return ::flock(lmdb_->owner_lock.get(), LOCK_EX | LOCK_NB); }) != 0) {
    if (errno != EWOULDBLOCK) {
      throw SystemError("flock(\"" + lock.string() + "\", LOCK_EX | LOCK_NB)", errno);
    }
    throw Error(ErrorCode::unavailable,
                "the blob cache at " + dir.string() +
                    " is open in another BlobCache, in this process or another; share that one");
  }

  MDB_env* env = lmdb_->env.get();
  const std::uint64_t map_size = 2 * cap_ + kMapSlack;
  lmdb::check(mdb_env_set_maxdbs(env, 2), "mdb_env_set_maxdbs(2)");
  lmdb::check(mdb_env_set_maxreaders(env, 1024), "mdb_env_set_maxreaders(1024)");
  lmdb::check(mdb_env_set_mapsize(env, map_size),
              "mdb_env_set_mapsize(" + std::to_string(map_size) + ")");
  const unsigned flags = MDB_NOTLS | (options.sync ? 0 : MDB_NOSYNC);
  lmdb::check(mdb_env_open(env, dir.c_str(), flags, 0644),
              "mdb_env_open(\"" + dir.string() + "\")");
  lmdb_->env.close_on_exec();
  load_index();
}

BlobCache::~BlobCache() {
  try {
    flush_recency();
  } catch (const std::exception&) {
    // Recency is advisory: losing it reorders eviction, nothing more.
  }
}

void BlobCache::load_index() {
  lmdb::Txn txn(lmdb_->env.get(), 0);
  lmdb::check(mdb_dbi_open(txn.get(), "blobs", MDB_CREATE, &lmdb_->blobs), "mdb_dbi_open(blobs)");
  lmdb::check(mdb_dbi_open(txn.get(), "index", MDB_CREATE, &lmdb_->index), "mdb_dbi_open(index)");
  std::vector<Digest> stale;  // index entries without a well-formed blob
  {
    lmdb::Cursor cursor(txn.get(), lmdb_->index);
    MDB_val key{}, value{};
    for (bool more = cursor.get(key, value, MDB_FIRST); more;
         more = cursor.get(key, value, MDB_NEXT)) {
      const auto digest = digest_of(key);
      if (!digest) continue;  // not a digest: removed below with the blobs' strays
      if (value.mv_size != kIndexValueSize || !txn.get(lmdb_->blobs, key)) {
        stale.push_back(*digest);
        continue;
      }
      const auto* raw = static_cast<const unsigned char*>(value.mv_data);
      const Entry entry{get_be64(raw), get_be64(raw + 8)};
      entries_[*digest] = entry;
      by_recency_[entry.tick] = *digest;
      next_tick_ = std::max(next_tick_, entry.tick + 1);
    }
  }
  for (const Digest& digest : stale) lmdb_->remove(txn, digest);
  // A blob without an index entry (a damaged index) is kept and counted, as
  // the most recently used; its size is its stored length.
  std::vector<std::pair<Digest, std::uint64_t>> unindexed;
  {
    lmdb::Cursor cursor(txn.get(), lmdb_->blobs);
    MDB_val key{}, value{};
    for (bool more = cursor.get(key, value, MDB_FIRST); more;
         more = cursor.get(key, value, MDB_NEXT)) {
      const auto digest = digest_of(key);
      if (digest && !entries_.contains(*digest)) unindexed.emplace_back(*digest, value.mv_size);
    }
  }
  for (const auto& [digest, size] : unindexed) {
    const std::uint64_t assigned = next_tick_++;
    entries_[digest] = Entry{size, assigned};
    by_recency_[assigned] = digest;
    lmdb_->write_index(txn, digest, size, assigned);
  }
  for (const auto& [digest, entry] : entries_) bytes_used_ += entry.size;
  txn.commit();
}

std::expected<Digest, Status> BlobCache::put(std::string_view bytes) {
  if (bytes.size() > cap_) {
    return std::unexpected(
        Status{ErrorCode::resource_exhausted, "a blob of " + bytes_text(bytes.size()) +
                                                  " is larger than the blob cache's cap of " +
                                                  bytes_text(cap_)});
  }
  return store_and_tell(Sha256::of(bytes), bytes);
}

std::expected<Digest, Status> BlobCache::put(const Digest& expected, std::string_view bytes) {
  const Digest actual = Sha256::of(bytes);
  if (actual != expected) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument, "the " + bytes_text(bytes.size()) + " given for blob " +
                                                expected.str() + " hash to " + actual.str() +
                                                "; nothing was stored"});
  }
  if (bytes.size() > cap_) {
    return std::unexpected(Status{ErrorCode::resource_exhausted,
                                  "blob " + expected.str() + " of " + bytes_text(bytes.size()) +
                                      " is larger than the blob cache's cap of " +
                                      bytes_text(cap_)});
  }
  return store_and_tell(actual, bytes);
}

std::expected<Digest, Status> BlobCache::store_and_tell(const Digest& digest,
                                                        std::string_view bytes) {
  std::vector<Digest> evicted;
  auto stored = store(digest, bytes, evicted);
  if (on_eviction_) {
    for (const Digest& victim : evicted) on_eviction_(victim);
  }
  return stored;
}

std::expected<Digest, Status> BlobCache::store(const Digest& digest, std::string_view bytes,
                                               std::vector<Digest>& evicted) {
  std::lock_guard writer(write_mutex_);
  return store_locked(digest, bytes, evicted, std::nullopt);
}

// With `disk_full`, a try before found the disk holding the cache without
// room, and blobs were evicted since: a refusal now says so.
std::expected<Digest, Status> BlobCache::store_locked(const Digest& digest, std::string_view bytes,
                                                      std::vector<Digest>& evicted,
                                                      const std::optional<std::string>& disk_full) {
  std::vector<std::pair<Digest, Entry>> victims;
  std::vector<std::pair<Digest, Entry>> recency;  // dirty entries to persist
  std::uint64_t tick = 0;
  {
    std::lock_guard lock(mutex_);
    if (entries_.contains(digest)) {
      touch_locked(digest);
      return digest;
    }
    const std::uint64_t size = bytes.size();
    std::uint64_t freed = 0;
    // Least recently used first, skipping pins, until the blob fits.
    for (auto it = by_recency_.begin(); bytes_used_ - freed + size > cap_; ++it) {
      if (it == by_recency_.end()) {
        const std::uint64_t pinned = pinned_bytes_locked();
        return std::unexpected(Status{
            ErrorCode::resource_exhausted,
            "cannot store blob " + digest.str() + " of " + bytes_text(size) +
                ": the blob cache's cap is " + bytes_text(cap_) + ", " + bytes_text(bytes_used_) +
                " are held and " + bytes_text(pinned) +
                " of them are pinned by assigned or running trials; release pins or raise the "
                "cap"});
      }
      if (pins_.contains(it->second)) continue;
      const Entry& entry = entries_.at(it->second);
      freed += entry.size;
      victims.emplace_back(it->second, entry);
    }
    // From here on the victims are gone for readers of the index: a pin
    // taken now sees them missing and the caller fetches them again.
    for (const auto& [victim, entry] : victims) {
      by_recency_.erase(entry.tick);
      entries_.erase(victim);
      dirty_.erase(victim);
    }
    bytes_used_ -= freed;
    for (const Digest& changed : dirty_) recency.emplace_back(changed, entries_.at(changed));
    dirty_.clear();
    tick = next_tick_++;
  }
  auto undo = [&] {
    std::lock_guard lock(mutex_);
    for (const auto& [victim, entry] : victims) {
      entries_[victim] = entry;
      by_recency_[entry.tick] = victim;
      bytes_used_ += entry.size;
    }
    for (const auto& [changed, entry] : recency) {
      if (entries_.contains(changed)) dirty_.insert(changed);
    }
  };
  try {
    lmdb::Txn txn(lmdb_->env.get(), 0);
    for (const auto& [victim, entry] : victims) lmdb_->remove(txn, victim);
    for (const auto& [changed, entry] : recency) {
      lmdb_->write_index(txn, changed, entry.size, entry.tick);
    }
    const auto space = txn.reserve(lmdb_->blobs, key_of(digest), bytes.size());
    if (!bytes.empty()) std::memcpy(space.data(), bytes.data(), bytes.size());
    lmdb_->write_index(txn, digest, bytes.size(), tick);
    txn.commit();
  } catch (const store::StoreFull& e) {
    undo();
    return on_full_disk(digest, bytes, evicted, disk_full, e.what());
  } catch (const lmdb::LmdbError& e) {
    undo();
    // A short write is reported as EIO; on a disk without room, that is a full disk.
    if (e.lmdb_code() == EIO && lmdb::disk_is_full(dir_)) {
      return on_full_disk(digest, bytes, evicted, disk_full, e.what());
    }
    if (e.lmdb_code() != MDB_MAP_FULL) throw;
    return std::unexpected(Status{
        ErrorCode::resource_exhausted,
        "cannot store blob " + digest.str() + " of " + bytes_text(bytes.size()) +
            ": the blob cache's LMDB map at " + dir_.string() +
            " is full (its free pages are too scattered for the blob); nothing was evicted"});
  } catch (...) {
    undo();
    throw;
  }
  {
    std::lock_guard lock(mutex_);
    entries_[digest] = Entry{bytes.size(), tick};
    by_recency_[tick] = digest;
    bytes_used_ += bytes.size();
  }
  for (const auto& [victim, entry] : victims) evicted.push_back(victim);
  return digest;
}

// LMDB reuses the pages a transaction freed only from the second transaction
// after it on: the blobs are removed in one transaction, their index entries
// in the next (an entry whose blob is gone is repaired away on open, should
// the worker die between the two), and the blob is stored in the one after.
std::expected<Digest, Status> BlobCache::on_full_disk(const Digest& digest, std::string_view bytes,
                                                      std::vector<Digest>& evicted,
                                                      const std::optional<std::string>& before,
                                                      const std::string& why) {
  if (!before && evict_for_room(bytes.size(), evicted)) {
    return store_locked(digest, bytes, evicted, why);
  }
  std::uint64_t held = 0;
  std::uint64_t pinned = 0;
  {
    std::lock_guard lock(mutex_);
    held = bytes_used_;
    pinned = pinned_bytes_locked();
  }
  return std::unexpected(Status{
      ErrorCode::resource_exhausted,
      "cannot store blob " + digest.str() + " of " + bytes_text(bytes.size()) +
          ": the disk holding the cache at " + dir_.string() + " is full (" + why + "); it holds " +
          bytes_text(held) + ", " + bytes_text(pinned) +
          " of them pinned by assigned or running trials, and evicting the rest " +
          (before ? "did not make room" : "cannot make room") + "; free space on that disk"});
}

// Evicts, least recently used first, unpinned blobs of at least `size`
// bytes in one committed transaction; false when there are not that many or
// the transaction fails. Requires write_mutex_.
bool BlobCache::evict_for_room(std::uint64_t size, std::vector<Digest>& evicted) {
  std::vector<std::pair<Digest, Entry>> victims;
  {
    std::lock_guard lock(mutex_);
    // The blob's size and room for the pages its transaction writes besides.
    const std::uint64_t wanted = size + (std::uint64_t{1} << 20);
    std::uint64_t freed = 0;
    for (auto it = by_recency_.begin(); freed < wanted && it != by_recency_.end(); ++it) {
      if (pins_.contains(it->second)) continue;
      const Entry& entry = entries_.at(it->second);
      freed += entry.size;
      victims.emplace_back(it->second, entry);
    }
    if (freed < size) return false;  // less margin than wanted is still worth a try
    for (const auto& [victim, entry] : victims) {
      by_recency_.erase(entry.tick);
      entries_.erase(victim);
      dirty_.erase(victim);
    }
    bytes_used_ -= freed;
  }
  try {
    for (MDB_dbi dbi : {lmdb_->blobs, lmdb_->index}) {
      lmdb::Txn txn(lmdb_->env.get(), 0);
      for (const auto& [victim, entry] : victims) lmdb_->remove_from(txn, dbi, victim);
      txn.commit();
    }
  } catch (const store::StoreError&) {
    std::lock_guard lock(mutex_);
    for (const auto& [victim, entry] : victims) {
      entries_[victim] = entry;
      by_recency_[entry.tick] = victim;
      bytes_used_ += entry.size;
    }
    return false;
  }
  for (const auto& [victim, entry] : victims) evicted.push_back(victim);
  return true;
}

std::optional<std::string> BlobCache::get(const Digest& digest) {
  std::string detail;
  {
    lmdb::Txn txn(lmdb_->env.get(), MDB_RDONLY);
    const auto value = txn.get(lmdb_->blobs, key_of(digest));
    if (!value) return std::nullopt;
    const std::string_view stored = lmdb::chars(*value);
    const Digest actual = Sha256::of(stored);
    if (actual == digest) {
      std::string copy(stored);
      txn.abort();
      std::lock_guard lock(mutex_);
      if (entries_.contains(digest)) touch_locked(digest);
      return copy;
    }
    detail = "the " + bytes_text(stored.size()) + " stored under " + digest.str() + " hash to " +
             actual.str();
  }
  drop_corrupt(digest, detail);
  return std::nullopt;
}

void BlobCache::drop_corrupt(const Digest& digest, const std::string& detail) {
  {
    std::lock_guard writer(write_mutex_);
    lmdb::Txn txn(lmdb_->env.get(), 0);
    // Another thread may have dropped it, or put good bytes, meanwhile.
    const auto value = txn.get(lmdb_->blobs, key_of(digest));
    if (!value || Sha256::of(lmdb::chars(*value)) == digest) return;
    lmdb_->remove(txn, digest);
    txn.commit();
    std::lock_guard lock(mutex_);
    if (const auto it = entries_.find(digest); it != entries_.end()) {
      by_recency_.erase(it->second.tick);
      bytes_used_ -= it->second.size;
      entries_.erase(it);
    }
    dirty_.erase(digest);
  }
  ++corrupt_drops_;
  if (on_corruption_) on_corruption_(digest, detail);
}

bool BlobCache::contains(const Digest& digest) const {
  std::lock_guard lock(mutex_);
  return entries_.contains(digest);
}

std::vector<Digest> BlobCache::missing(std::span<const Digest> wanted) const {
  std::lock_guard lock(mutex_);
  std::vector<Digest> out;
  for (const Digest& digest : wanted) {
    if (!entries_.contains(digest)) out.push_back(digest);
  }
  return out;
}

std::vector<Digest> BlobCache::summary() const {
  std::lock_guard lock(mutex_);
  std::vector<Digest> out;
  out.reserve(entries_.size());
  for (const auto& [digest, entry] : entries_) out.push_back(digest);
  return out;
}

std::uint64_t BlobCache::bytes_used() const {
  std::lock_guard lock(mutex_);
  return bytes_used_;
}

std::uint64_t BlobCache::pinned_bytes() const {
  std::lock_guard lock(mutex_);
  return pinned_bytes_locked();
}

std::uint64_t BlobCache::pinned_bytes_locked() const {
  std::uint64_t total = 0;
  for (const auto& [digest, count] : pins_) {
    if (const auto it = entries_.find(digest); it != entries_.end()) total += it->second.size;
  }
  return total;
}

void BlobCache::touch_locked(const Digest& digest) {
  Entry& entry = entries_.at(digest);
  by_recency_.erase(entry.tick);
  entry.tick = next_tick_++;
  by_recency_[entry.tick] = digest;
  dirty_.insert(digest);
}

BlobCache::Pin BlobCache::pin(const Digest& digest) {
  std::lock_guard lock(mutex_);
  ++pins_[digest];
  if (entries_.contains(digest)) touch_locked(digest);
  return Pin(this, digest);
}

void BlobCache::unpin(const Digest& digest) {
  std::lock_guard lock(mutex_);
  const auto it = pins_.find(digest);
  if (it != pins_.end() && --it->second == 0) pins_.erase(it);
}

void BlobCache::flush_recency() {
  std::lock_guard writer(write_mutex_);
  std::vector<std::pair<Digest, Entry>> recency;
  {
    std::lock_guard lock(mutex_);
    for (const Digest& changed : dirty_) recency.emplace_back(changed, entries_.at(changed));
    dirty_.clear();
  }
  if (recency.empty()) return;
  try {
    lmdb::Txn txn(lmdb_->env.get(), 0);
    for (const auto& [changed, entry] : recency) {
      lmdb_->write_index(txn, changed, entry.size, entry.tick);
    }
    txn.commit();
  } catch (...) {
    std::lock_guard lock(mutex_);
    for (const auto& [changed, entry] : recency) {
      if (entries_.contains(changed)) dirty_.insert(changed);
    }
    throw;
  }
}

BlobCache::Pin::Pin(Pin&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)), digest_(other.digest_) {}

BlobCache::Pin& BlobCache::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = std::exchange(other.cache_, nullptr);
    digest_ = other.digest_;
  }
  return *this;
}

void BlobCache::Pin::release() {
  if (cache_ != nullptr) std::exchange(cache_, nullptr)->unpin(digest_);
}

}  // namespace forktrial::worker
