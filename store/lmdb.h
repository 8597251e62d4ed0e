// Move-only owners for LMDB handles: the store's, and public for any
// component that keeps an LMDB environment of its own (the worker's blob
// cache). Nothing here knows the store's databases.
//
// `Env` owns an MDB_env, `Txn` an MDB_txn (aborted in its destructor unless
// commit() was called), `Cursor` an MDB_cursor. Every failing LMDB call throws
// `LmdbError`, which names the call and its arguments and keeps the return
// code so callers can react to MDB_MAP_FULL and MDB_MAP_RESIZED.
//
// LMDB's own rules apply: one write transaction at a time per environment
// (LMDB serializes them with a mutex); with MDB_NOTLS, which the store always
// sets, a read transaction is not bound to the thread that began it. Data
// returned by a get or a cursor is valid until the next update in the same
// transaction or the end of the transaction.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "store/event_store.h"

namespace forktrial::store::lmdb {

// A StoreError, so callers of the public API need not know about LMDB. Its
// category is that of the errno when LMDB returns one (a store whose files
// this user may not write is failed_precondition), internal for LMDB's own
// codes.
class LmdbError : public StoreError {
 public:
  LmdbError(const std::string& call, int rc);
  int lmdb_code() const { return code_; }  // LMDB's return code (MDB_MAP_FULL, ...)

 private:
  int code_;
};

// Throws LmdbError("<call>: <mdb_strerror>") when rc != MDB_SUCCESS, or
// StoreOutOfMemory when rc is ENOMEM, StoreFull when it is ENOSPC or EDQUOT.
void check(int rc, const char* call);
void check(int rc, const std::string& call);

// Less than 64 KiB is left for unprivileged writes on the file system holding
// `path`: what LMDB reports as EIO (a short write) then means a full disk.
bool disk_is_full(const std::filesystem::path& path);

inline MDB_val val(std::span<const std::byte> bytes) {
  return MDB_val{bytes.size(), const_cast<std::byte*>(bytes.data())};
}
inline MDB_val val(std::string_view bytes) {
  return MDB_val{bytes.size(), const_cast<char*>(bytes.data())};
}
inline std::span<const std::byte> bytes(const MDB_val& v) {
  return {static_cast<const std::byte*>(v.mv_data), v.mv_size};
}
inline std::string_view chars(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

class Env {
 public:
  Env();  // mdb_env_create
  ~Env();
  Env(Env&& other) noexcept : env_(std::exchange(other.env_, nullptr)) {}
  Env& operator=(Env&& other) noexcept;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  MDB_env* get() const { return env_; }

  // After mdb_env_open: marks the data file's descriptor (mdb_env_get_fd)
  // close-on-exec, so no program this process executes inherits write access
  // to the store. liblmdb 0.9.24 opens the data file without O_CLOEXEC and
  // its lock file and synchronous-meta descriptor with it (mdb_fopen); the
  // store's tests check that every descriptor an open store adds is
  // close-on-exec, so a liblmdb that stops doing so fails them. Descriptors
  // this thread does not own are never touched: a scan of /proc/self/fd
  // would fstat and mark other threads' descriptors while they close them.
  // Throws SystemError or LmdbError naming the failed call. Another thread
  // that executes a program between mdb_env_open and this call can still
  // pass the data file on; forktrial's children start with every descriptor
  // past stdio closed (posix_spawn's closefrom).
  void close_on_exec() const;

 private:
  MDB_env* env_ = nullptr;
};

class Txn {
 public:
  Txn() = default;
  Txn(MDB_env* env, unsigned flags);  // mdb_txn_begin without a parent
  // Begins a transaction in this empty owner; returns LMDB's code instead of
  // throwing, for callers that recover from MDB_MAP_RESIZED.
  int try_begin(MDB_env* env, unsigned flags);
  ~Txn() { abort(); }
  Txn(Txn&& other) noexcept : txn_(std::exchange(other.txn_, nullptr)) {}
  Txn& operator=(Txn&& other) noexcept;
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  MDB_txn* get() const { return txn_; }
  explicit operator bool() const { return txn_ != nullptr; }
  void commit();  // the transaction is gone afterwards, committed or not
  void abort();

  std::optional<MDB_val> get(MDB_dbi dbi, MDB_val key) const;
  void put(MDB_dbi dbi, MDB_val key, MDB_val value, unsigned flags = 0);
  // Puts with MDB_NOOVERWRITE; returns false, writing nothing, if `key` exists.
  bool put_new(MDB_dbi dbi, MDB_val key, MDB_val value);
  // Deletes `key`; returns false when there was none.
  bool del(MDB_dbi dbi, MDB_val key);
  // Reserves `size` bytes for `key` and returns them for the caller to fill
  // before the next update in this transaction (MDB_RESERVE).
  std::span<std::byte> reserve(MDB_dbi dbi, MDB_val key, std::size_t size);

 private:
  MDB_txn* txn_ = nullptr;
};

class Cursor {
 public:
  Cursor(MDB_txn* txn, MDB_dbi dbi);
  ~Cursor();
  Cursor(Cursor&& other) noexcept : cursor_(std::exchange(other.cursor_, nullptr)) {}
  Cursor& operator=(Cursor&&) = delete;
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // Positions the cursor; returns false at MDB_NOTFOUND. `key` and `value`
  // are filled on success.
  bool get(MDB_val& key, MDB_val& value, MDB_cursor_op op);
  void put(MDB_val key, MDB_val value, unsigned flags = 0);
  // Deletes the item the cursor is at (mdb_cursor_del).
  void del();
  // mdb_cursor_put with MDB_RESERVE | flags; see Txn::reserve.
  std::span<std::byte> reserve(MDB_val key, std::size_t size, unsigned flags = 0);

 private:
  MDB_cursor* cursor_ = nullptr;
};

}  // namespace forktrial::store::lmdb
