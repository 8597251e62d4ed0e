#include "store/environment.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>

#include "base/timestamp.h"
#include "base/unique_fd.h"

namespace forktrial::store {
namespace {

constexpr std::string_view kSchemaVersionKey = "schema_version";

// LMDB forbids opening one environment twice in a process; this registry of
// open store directories (by device and inode) turns that rule into an error
// instead of silently broken locking. It mirrors a process-wide constraint,
// hence process-wide state.
class OpenStores {
 public:
  static bool add(std::pair<dev_t, ino_t> key) {
    std::lock_guard lock(mutex());
    return set().insert(key).second;
  }
  static void remove(std::pair<dev_t, ino_t> key) {
    std::lock_guard lock(mutex());
    set().erase(key);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::pair<dev_t, ino_t>>& set() {
    static std::set<std::pair<dev_t, ino_t>> s;
    return s;
  }
};

RunId random_run_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char text[32];
  std::snprintf(text, sizeof text, "run_%016llx", static_cast<unsigned long long>(rng()));
  return RunId(text);
}

}  // namespace

OpenRegistration::OpenRegistration(const std::filesystem::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw SystemError("stat(\"" + dir.string() + "\")", errno);
  key_ = {st.st_dev, st.st_ino};
  if (!OpenStores::add(key_)) {
    throw StoreError("the store at " + dir.string() +
                     " is already open in this process; share the one EventStore instead of "
                     "opening it twice (LMDB forbids a second handle in one process)");
  }
}

OpenRegistration::~OpenRegistration() {
  OpenStores::remove(key_);
}

SchemaVersionMismatch::SchemaVersionMismatch(const std::filesystem::path& path, std::uint32_t found)
    : StoreError("the store at " + path.string() + " has schema version " + std::to_string(found) +
                     ", but this forktrial reads schema versions " +
                     std::to_string(kOldestSchemaVersion) + " to " +
                     std::to_string(kSchemaVersion) +
                     " only; open it with a forktrial built for version " + std::to_string(found) +
                     ", or export its runs there and import them here (docs/store-format.md, "
                     "\"Versioning\")",
                 ErrorCode::failed_precondition),
      found_(found) {}

Environment::Environment(const std::filesystem::path& path, StoreOptions options)
    : path_(path), options_(std::move(options)) {
  if (!options_.clock) options_.clock = now_timestamp;
  if (!options_.new_run_id) options_.new_run_id = random_run_id;
  options_.initial_map_size = std::min(options_.initial_map_size, options_.max_map_size);

  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    throw StoreError("cannot create the store directory " + path.string() + ": " + ec.message(),
                     error_code_of_errno(ec.value()));
  }
  registration_.emplace(path);

  lmdb::check(mdb_env_set_maxdbs(env_.get(), 16), "mdb_env_set_maxdbs(16)");
  lmdb::check(mdb_env_set_maxreaders(env_.get(), options_.max_readers),
              "mdb_env_set_maxreaders(" + std::to_string(options_.max_readers) + ")");
  lmdb::check(mdb_env_set_mapsize(env_.get(), options_.initial_map_size),
              "mdb_env_set_mapsize(" + std::to_string(options_.initial_map_size) + ")");
  unsigned flags = MDB_NOTLS | (options_.sync ? 0 : MDB_NOSYNC) |
                   (options_.sync_meta ? 0 : MDB_NOMETASYNC) |
                   (options_.exclusive ? MDB_NOLOCK : 0);
  if (const int rc = mdb_env_open(env_.get(), path.c_str(), flags, 0644);
      rc == EACCES || rc == EPERM || rc == EROFS) {
    throw StoreError("mdb_env_open(\"" + path.string() + "\"): " + mdb_strerror(rc) +
                         ": this user (uid " + std::to_string(::geteuid()) +
                         ") may not write the store's files there; run as the user that owns "
                         "them, or give a store this user may write",
                     ErrorCode::failed_precondition);
  } else {
    lmdb::check(rc, "mdb_env_open(\"" + path.string() + "\")");
  }
  env_.close_on_exec();
  MDB_envinfo info{};
  lmdb::check(mdb_env_info(env_.get(), &info), "mdb_env_info");
  map_size_ = info.me_mapsize;

  lmdb::Txn txn(env_.get(), 0);
  lmdb::check(mdb_dbi_open(txn.get(), "meta", MDB_CREATE, &dbis_.meta), "mdb_dbi_open(meta)");
  auto version = txn.get(dbis_.meta, lmdb::val(kSchemaVersionKey));
  if (version) {
    if (version->mv_size != 4) {
      throw StoreError("the store at " + path.string() + " has a schema version record of " +
                       std::to_string(version->mv_size) + " bytes instead of 4; it is corrupt");
    }
    auto* b = static_cast<const unsigned char*>(version->mv_data);
    std::uint32_t found = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                          (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    // A version-1 store (before deflated events) is read and written as
    // version 1: this build never deflates into it.
    if (found < kOldestSchemaVersion || found > kSchemaVersion) {
      throw SchemaVersionMismatch(path, found);
    }
    schema_version_ = found;
  } else {
    unsigned char b[4] = {static_cast<unsigned char>(kSchemaVersion >> 24),
                          static_cast<unsigned char>(kSchemaVersion >> 16),
                          static_cast<unsigned char>(kSchemaVersion >> 8),
                          static_cast<unsigned char>(kSchemaVersion)};
    txn.put(dbis_.meta, lmdb::val(kSchemaVersionKey), MDB_val{4, b});
  }
  auto open_db = [&](const char* name, MDB_dbi& dbi) {
    lmdb::check(mdb_dbi_open(txn.get(), name, MDB_CREATE, &dbi),
                std::string("mdb_dbi_open(") + name + ")");
  };
  open_db("runs", dbis_.runs);
  open_db("run_numbers", dbis_.run_numbers);
  open_db("events", dbis_.events);
  open_db("event_ids", dbis_.event_ids);
  open_db("blobs", dbis_.blobs);
  open_db("blob_times", dbis_.blob_times);
  txn.commit();
}

void Environment::sync() {
  lmdb::check(mdb_env_sync(env_.get(), 1), "mdb_env_sync(force)");
  ++syncs_;
}

void Environment::copy_compacted(const std::filesystem::path& to) {
  // Held while LMDB copies from its own read transaction, so the map does not
  // change under the copy.
  const ReadTxn held = read();
  lmdb::check(mdb_env_copy2(env_.get(), to.c_str(), MDB_CP_COMPACT),
              "mdb_env_copy2(" + to.string() + ", MDB_CP_COMPACT)");
}

void Environment::write(const std::function<bool(lmdb::Txn&)>& body) {
  for (;;) {
    const std::size_t size_at_start = map_size_;
    int rc = MDB_SUCCESS;
    try {
      TxnGate::Ticket ticket = gate_.enter();
      if (options_.exclusive) require_alone();
      lmdb::Txn txn;
      rc = txn.try_begin(env_.get(), 0);
      if (rc == MDB_SUCCESS) {
        if (body(txn)) {
          if (options_.before_commit) options_.before_commit();
          txn.commit();
          ++commits_;
        }
        return;
      }
    } catch (const lmdb::LmdbError& e) {
      // LMDB reports a short write as EIO: on a disk without room, that is
      // what a full disk looks like.
      if (e.lmdb_code() == EIO && lmdb::disk_is_full(path_)) {
        throw StoreFull(std::string(e.what()) + " (a short write): the disk holding the store at " +
                        path_.string() +
                        " has no room; nothing of this write was kept and the store stays "
                        "readable; free space on that disk");
      }
      if (e.lmdb_code() != MDB_MAP_FULL && e.lmdb_code() != MDB_MAP_RESIZED) throw;
      rc = e.lmdb_code();
    }
    // The transaction has ended and left the gate, so the map may change.
    if (rc == MDB_MAP_FULL) {
      grow(size_at_start);
    } else if (rc == MDB_MAP_RESIZED) {
      adopt_resized("nothing of this write was kept");
    } else {
      lmdb::check(rc, "mdb_txn_begin(write, \"" + path_.string() + "\")");
    }
  }
}

void Environment::require_alone() const {
  // Only the write's own transaction is open: no snapshot reads pages this
  // write may reuse, and no other write runs (LMDB's writer lock is in the
  // lock file an exclusive store does without).
  if (const std::size_t open = gate_.open(); open > 1) {
    throw std::logic_error("a write to the exclusive store at " + path_.string() + " began while " +
                           std::to_string(open - 1) +
                           " other transactions of this process were open; an exclusive store "
                           "(StoreOptions::exclusive) is written only while nothing else of it "
                           "is open");
  }
}

ReadTxn Environment::read() {
  for (;;) {
    {
      ReadTxn read;
      read.ticket = gate_.enter();
      const int rc = read.txn.try_begin(env_.get(), MDB_RDONLY);
      if (rc == MDB_SUCCESS) return read;
      if (rc != MDB_MAP_RESIZED) {
        lmdb::check(rc, "mdb_txn_begin(MDB_RDONLY, \"" + path_.string() + "\")");
      }
    }  // leaves the gate, which the resize waits for
    adopt_resized("no snapshot was opened");
  }
}

void Environment::resize(const std::string& need, const std::string& lost,
                         const std::function<void()>& change) {
  const auto blocked = gate_.resize(options_.grow_wait, change);
  if (!blocked) return;
  std::string message = need +
                        ". LMDB changes a map only while no transaction of this process is "
                        "open (it maps the file anew), but ";
  if (blocked->held_here > 0) {
    message += "this thread holds " + std::to_string(blocked->held_here) + " open snapshot" +
               (blocked->held_here == 1 ? "" : "s") + " of it: " + lost +
               "; end the thread's snapshots first, since it would wait for itself";
  } else {
    message += std::to_string(blocked->open) +
               (blocked->open == 1 ? " snapshot or write" : " snapshots or writes") +
               " of this process stayed open for " + std::to_string(options_.grow_wait.count()) +
               " ms: " + lost + "; end long-lived snapshots, then retry";
  }
  throw ResizeBlocked(message);
}

// LMDB: size 0 means "the size now in the file".
void Environment::adopt_resized(const std::string& lost) {
  resize("another process grew the store at " + path_.string() + " beyond this process's map of " +
             std::to_string(map_size_) + " bytes",
         lost, [&] {
           lmdb::check(mdb_env_set_mapsize(env_.get(), 0), "mdb_env_set_mapsize(0)");
           MDB_envinfo info{};
           lmdb::check(mdb_env_info(env_.get(), &info), "mdb_env_info");
           map_size_ = info.me_mapsize;
         });
}

void Environment::grow(std::size_t failed_size) {
  if (failed_size >= options_.max_map_size) {
    throw StoreFull("the store at " + path_.string() + " is full: the write needs more than " +
                    std::to_string(options_.max_map_size) +
                    " bytes, the maximum map size; nothing of this write was kept and the "
                    "store stays readable; open it with a larger maximum map size "
                    "(StoreOptions::max_map_size)");
  }
  resize("the store at " + path_.string() + " must grow its map beyond " +
             std::to_string(failed_size) + " bytes for this write",
         "nothing of this write was kept", [&] {
           const std::size_t now = map_size_;
           if (now > failed_size) return;  // another writer grew it meanwhile
           const std::size_t next = std::min(options_.max_map_size, now * 2);
           lmdb::check(mdb_env_set_mapsize(env_.get(), next),
                       "mdb_env_set_mapsize(" + std::to_string(next) + ")");
           map_size_ = next;
         });
}

}  // namespace forktrial::store
