// The store's LMDB environment: opening it, its named databases, and the size
// of its map. Private to the store; EventStore owns one and begins every
// transaction through it (docs/store-format.md, "Environment").
//
// Opening registers the directory in a process-wide registry of open stores,
// because LMDB forbids a second handle on one environment in a process, sets
// the environment's limits, checks the schema version (writing it into a
// fresh store) and opens the named databases.
//
// The map: LMDB changes its size only while no transaction of the process is
// open (it maps the file anew), so every transaction begins through write()
// or read(), which enter it in a TxnGate (store/txn_gate.h). A write that
// runs out of room doubles the map, and a transaction that finds another
// process wrote past this process's map (MDB_MAP_RESIZED) adopts that
// process's size; either waits for the other open transactions to end, as
// event_store.h ("The map") describes.
//
// Thread-safety: an Environment may be used from any number of threads at
// once. Its path, options and database handles do not change after the
// constructor; the map size changes only inside the gate's resize. A ReadTxn
// is used by one thread at a time and must not outlive its Environment.
#pragma once

#include <lmdb.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "store/event_store.h"
#include "store/lmdb.h"
#include "store/txn_gate.h"

namespace forktrial::store {

// The handles of the named databases (docs/store-format.md, "Named
// databases"), valid for the life of the environment.
struct Dbis {
  MDB_dbi meta = 0;
  MDB_dbi runs = 0;
  MDB_dbi run_numbers = 0;
  MDB_dbi events = 0;
  MDB_dbi event_ids = 0;
  MDB_dbi blobs = 0;
  MDB_dbi blob_times = 0;
};

// A directory entered in the process-wide registry of open stores (by device
// and inode) for the life of the object. The constructor throws StoreError
// when the directory is open in this process already, SystemError when it
// cannot be stat'ed.
class OpenRegistration {
 public:
  explicit OpenRegistration(const std::filesystem::path& dir);
  ~OpenRegistration();
  OpenRegistration(const OpenRegistration&) = delete;
  OpenRegistration& operator=(const OpenRegistration&) = delete;

 private:
  std::pair<dev_t, ino_t> key_;
};

// A read transaction entered in the gate. `ticket` is left after `txn` has
// ended: members end in reverse order.
struct ReadTxn {
  TxnGate::Ticket ticket;
  lmdb::Txn txn;
};

class Environment {
 public:
  // Opens (creating if needed) the store in directory `path`. Options left
  // empty get their defaults: the system clock, random run ids ("run_" and 16
  // hex digits); the initial map size is capped at the maximum. Throws
  // StoreError when the directory cannot be created or is open in this
  // process already, SchemaVersionMismatch for a store of another schema
  // version, and LmdbError (a StoreError) when LMDB fails.
  Environment(const std::filesystem::path& path, StoreOptions options);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const StoreOptions& options() const { return options_; }
  // The schema version of the store's layout (meta/schema_version).
  std::uint32_t schema_version() const { return schema_version_; }
  // Whether appends store events deflated: asked for, and the store's
  // version has deflated events (a version-1 store stays readable by the
  // builds that wrote it).
  bool deflates_events() const { return options_.deflate_events && schema_version_ >= 2; }
  const Dbis& dbis() const { return dbis_; }
  std::size_t map_size() const { return map_size_; }
  // Write transactions committed, and forced flushes (sync()), since open.
  std::uint64_t commits() const { return commits_; }
  std::uint64_t syncs() const { return syncs_; }

  // Runs `body` in one write transaction, committed when it returns true and
  // aborted when it returns false or throws. When the transaction runs out of
  // room (MDB_MAP_FULL) or meets another process's larger map
  // (MDB_MAP_RESIZED), it is aborted, the map changes, and `body` runs again.
  // Throws StoreFull when the map may not grow further, ResizeBlocked when it
  // cannot change now; whatever `body` throws otherwise propagates.
  void write(const std::function<bool(lmdb::Txn&)>& body);

  // Flushes every committed transaction to disk, the last commit's meta page
  // included (mdb_env_sync, forced): with sync_meta false, what a commit
  // must survive a power loss for. Throws LmdbError when the flush fails.
  void sync();

  // Writes a compacted copy of the store (live pages only, free pages
  // dropped) into the directory `to`, which must exist and hold no store
  // (mdb_env_copy2 with MDB_CP_COMPACT). Throws LmdbError when it fails.
  void copy_compacted(const std::filesystem::path& to);

  // Begins a read-only transaction, held by the calling thread, adopting
  // another process's map size first if needed. Throws ResizeBlocked when the
  // map cannot follow it now, StoreError (MDB_READERS_FULL, ...) otherwise.
  ReadTxn read();

 private:
  // Changes the map through the gate, or throws ResizeBlocked saying what
  // needed the change (`need`), what blocked it, and what the caller lost.
  void resize(const std::string& need, const std::string& lost,
              const std::function<void()>& change);
  // Adopts the map size another process set.
  void adopt_resized(const std::string& lost);
  // For a write to an exclusive store: throws std::logic_error unless the
  // calling write's transaction is the only one of the process open.
  void require_alone() const;
  // Doubles the map, up to max_map_size, after a write ran out of room in a
  // map of `failed_size` bytes.
  void grow(std::size_t failed_size);

  std::filesystem::path path_;
  StoreOptions options_;
  std::uint32_t schema_version_ = kSchemaVersion;
  std::optional<OpenRegistration> registration_;
  lmdb::Env env_;
  Dbis dbis_;
  // Every transaction of this process is entered here before it begins and
  // left once it has ended; the map changes size only through gate_.resize(),
  // because LMDB maps the file anew only while no transaction is open.
  TxnGate gate_;
  std::atomic<std::size_t> map_size_ = 0;  // changed only inside gate_.resize()
  std::atomic<std::uint64_t> commits_ = 0;
  std::atomic<std::uint64_t> syncs_ = 0;
};

}  // namespace forktrial::store
