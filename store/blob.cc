#include "store/blob.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/unique_fd.h"

namespace forktrial::store::blob {
namespace {

MDB_val key_of(const Digest& digest) {
  return lmdb::val(std::as_bytes(std::span(digest.bytes())));
}

}  // namespace

std::optional<std::span<const std::byte>> get(MDB_txn* txn, MDB_dbi blobs, const Digest& digest) {
  MDB_val key = key_of(digest);
  MDB_val value{};
  int rc = mdb_get(txn, blobs, &key, &value);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  lmdb::check(rc, "mdb_get(blobs)");
  return lmdb::bytes(value);
}

Digest put(lmdb::Txn& txn, MDB_dbi blobs, std::span<const std::byte> bytes) {
  Sha256 hasher;
  hasher.update(bytes.data(), bytes.size());
  Digest digest = hasher.finish();
  if (get(txn.get(), blobs, digest)) return digest;
  auto space = txn.reserve(blobs, key_of(digest), bytes.size());
  if (!bytes.empty()) std::memcpy(space.data(), bytes.data(), bytes.size());
  return digest;
}

Digest put_produced(lmdb::Txn& txn, MDB_dbi blobs, const std::string& what,
                    const Producer& produce) {
  Sha256 hasher;
  std::size_t size = 0;
  produce([&](std::span<const std::byte> chunk) {
    hasher.update(chunk.data(), chunk.size());
    size += chunk.size();
  });
  Digest digest = hasher.finish();
  if (get(txn.get(), blobs, digest)) return digest;

  // The second pass goes straight into the reserved value and is hashed
  // again, so content that changed between the passes is caught instead of
  // stored under a digest that does not match its bytes.
  auto space = txn.reserve(blobs, key_of(digest), size);
  Sha256 verify;
  std::size_t filled = 0;
  produce([&](std::span<const std::byte> chunk) {
    if (chunk.size() > size - filled) {
      throw StoreError(what + " grew while it was being stored (beyond the " +
                       std::to_string(size) + " bytes hashed first)");
    }
    std::memcpy(space.data() + filled, chunk.data(), chunk.size());
    verify.update(chunk.data(), chunk.size());
    filled += chunk.size();
  });
  if (filled != size || verify.finish() != digest) {
    throw StoreError(what + " changed while it was being stored");
  }
  return digest;
}

Digest put_file(lmdb::Txn& txn, MDB_dbi blobs, const std::filesystem::path& file) {
  UniqueFd fd(retry_eintr([&] { return ::open(file.c_str(), O_RDONLY | O_CLOEXEC); }));
  if (!fd) throw SystemError("open(\"" + file.string() + "\", O_RDONLY)", errno);
  std::vector<std::byte> buffer(std::size_t{1} << 20);
  // Each pass reads the whole file from offset 0.
  const auto read_all = [&](const Sink& sink) {
    off_t offset = 0;
    for (;;) {
      ssize_t n =
          retry_eintr([&] { return ::pread(fd.get(), buffer.data(), buffer.size(), offset); });
      if (n < 0) throw SystemError("pread(\"" + file.string() + "\")", errno);
      if (n == 0) return;
      sink(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)));
      offset += n;
    }
  };
  return put_produced(txn, blobs, "the file " + file.string(), read_all);
}

}  // namespace forktrial::store::blob
