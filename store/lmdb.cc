#include "store/lmdb.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <memory>

#include "base/unique_fd.h"

namespace forktrial::store::lmdb {
namespace {

void set_close_on_exec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    throw SystemError("fcntl(" + std::to_string(fd) + ", F_SETFD, FD_CLOEXEC)", errno);
  }
}

}  // namespace

// LMDB's own codes (MDB_CORRUPTED, ...) are negative; a positive one is the
// errno of a failed system call, whose category says what to do
// (EACCES: failed_precondition, EAGAIN: unavailable).
LmdbError::LmdbError(const std::string& call, int rc)
    : StoreError(call + ": " + mdb_strerror(rc),
                 rc > 0 ? error_code_of_errno(rc) : ErrorCode::internal),
      code_(rc) {}

void check(int rc, const std::string& call) {
  if (rc == MDB_SUCCESS) return;
  if (rc == ENOMEM) throw StoreOutOfMemory(call + ": " + mdb_strerror(rc));
  if (rc == ENOSPC || rc == EDQUOT) {
    throw StoreFull(call + ": " + mdb_strerror(rc) +
                    ": the disk holding the store has no room; nothing of this write was kept "
                    "and the store stays readable; free space on that disk");
  }
  throw LmdbError(call, rc);
}

bool disk_is_full(const std::filesystem::path& path) {
  struct statvfs disk {};
  if (::statvfs(path.c_str(), &disk) != 0) return false;
  return static_cast<std::uint64_t>(disk.f_bavail) * disk.f_frsize < std::uint64_t{1} << 16;
}

void check(int rc, const char* call) {
  if (rc != MDB_SUCCESS) check(rc, std::string(call));
}

Env::Env() {
  check(mdb_env_create(&env_), "mdb_env_create");
}

Env::~Env() {
  if (env_ != nullptr) mdb_env_close(env_);
}

Env& Env::operator=(Env&& other) noexcept {
  if (this != &other) {
    if (env_ != nullptr) mdb_env_close(env_);
    env_ = std::exchange(other.env_, nullptr);
  }
  return *this;
}

void Env::close_on_exec() const {
  mdb_filehandle_t data_fd = -1;
  check(mdb_env_get_fd(env_, &data_fd), "mdb_env_get_fd");
  set_close_on_exec(data_fd);
}

Txn::Txn(MDB_env* env, unsigned flags) {
  check(mdb_txn_begin(env, nullptr, flags, &txn_),
        (flags & MDB_RDONLY) != 0 ? "mdb_txn_begin(MDB_RDONLY)" : "mdb_txn_begin(write)");
}

int Txn::try_begin(MDB_env* env, unsigned flags) {
  abort();
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, flags, &txn);
  if (rc == MDB_SUCCESS) txn_ = txn;
  return rc;
}

Txn& Txn::operator=(Txn&& other) noexcept {
  if (this != &other) {
    abort();
    txn_ = std::exchange(other.txn_, nullptr);
  }
  return *this;
}

void Txn::commit() {
  MDB_txn* txn = std::exchange(txn_, nullptr);
  // mdb_txn_commit frees the handle whether or not it succeeds.
  check(mdb_txn_commit(txn), "mdb_txn_commit");
}

void Txn::abort() {
  if (txn_ != nullptr) mdb_txn_abort(std::exchange(txn_, nullptr));
}

std::optional<MDB_val> Txn::get(MDB_dbi dbi, MDB_val key) const {
  MDB_val value{};
  int rc = mdb_get(txn_, dbi, &key, &value);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  check(rc, "mdb_get");
  return value;
}

void Txn::put(MDB_dbi dbi, MDB_val key, MDB_val value, unsigned flags) {
  check(mdb_put(txn_, dbi, &key, &value, flags), "mdb_put");
}

bool Txn::put_new(MDB_dbi dbi, MDB_val key, MDB_val value) {
  int rc = mdb_put(txn_, dbi, &key, &value, MDB_NOOVERWRITE);
  if (rc == MDB_KEYEXIST) return false;
  check(rc, "mdb_put(MDB_NOOVERWRITE)");
  return true;
}

bool Txn::del(MDB_dbi dbi, MDB_val key) {
  int rc = mdb_del(txn_, dbi, &key, nullptr);
  if (rc == MDB_NOTFOUND) return false;
  check(rc, "mdb_del");
  return true;
}

std::span<std::byte> Txn::reserve(MDB_dbi dbi, MDB_val key, std::size_t size) {
  MDB_val value{size, nullptr};
  int rc = mdb_put(txn_, dbi, &key, &value, MDB_RESERVE);
  // The message is built only on failure: this is the append hot path.
  if (rc != MDB_SUCCESS) {
    check(rc, "mdb_put(MDB_RESERVE, " + std::to_string(size) + " bytes)");
  }
  return {static_cast<std::byte*>(value.mv_data), size};
}

Cursor::Cursor(MDB_txn* txn, MDB_dbi dbi) {
  check(mdb_cursor_open(txn, dbi, &cursor_), "mdb_cursor_open");
}

Cursor::~Cursor() {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
}

bool Cursor::get(MDB_val& key, MDB_val& value, MDB_cursor_op op) {
  int rc = mdb_cursor_get(cursor_, &key, &value, op);
  if (rc == MDB_NOTFOUND) return false;
  check(rc, "mdb_cursor_get");
  return true;
}

void Cursor::put(MDB_val key, MDB_val value, unsigned flags) {
  check(mdb_cursor_put(cursor_, &key, &value, flags), "mdb_cursor_put");
}

void Cursor::del() {
  check(mdb_cursor_del(cursor_, 0), "mdb_cursor_del");
}

std::span<std::byte> Cursor::reserve(MDB_val key, std::size_t size, unsigned flags) {
  MDB_val value{size, nullptr};
  int rc = mdb_cursor_put(cursor_, &key, &value, MDB_RESERVE | flags);
  if (rc != MDB_SUCCESS) {
    check(rc, "mdb_cursor_put(MDB_RESERVE, " + std::to_string(size) + " bytes)");
  }
  return {static_cast<std::byte*>(value.mv_data), size};
}

}  // namespace forktrial::store::lmdb
