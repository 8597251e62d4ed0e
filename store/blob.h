// The blob table: bytes stored under the SHA-256 digest of their content
// (docs/store-format.md, "blobs"). Private to the store: EventStore, Writer
// and Snapshot call these inside their own transactions.
//
// The digest is always computed here, never taken from a caller. Values may
// be hundreds of MiB, so content produced in chunks is hashed in one pass and
// copied straight into space reserved in LMDB (MDB_RESERVE) in a second: it is
// never held whole in memory.
//
// Thread-safety: stateless; each call uses the transaction it is given, which
// belongs to one thread at a time.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "base/digest.h"
#include "store/lmdb.h"

namespace forktrial::store::blob {

using Sink = std::function<void(std::span<const std::byte>)>;
// Passes the whole content, chunk by chunk, to the sink it is given.
using Producer = std::function<void(const Sink&)>;

// The stored bytes, a view into the map valid for the transaction; nullopt
// when no blob has that digest.
std::optional<std::span<const std::byte>> get(MDB_txn* txn, MDB_dbi blobs, const Digest& digest);

// Stores `bytes` unless a blob with their digest is stored already.
Digest put(lmdb::Txn& txn, MDB_dbi blobs, std::span<const std::byte> bytes);

// Stores the content `produce` yields: once to hash it, and (unless a blob
// with that digest is stored) once more into the reserved value, hashed again.
// Throws StoreError naming `what` ("the file x.bin") when the second pass
// yields other bytes than the first; whatever `produce` throws propagates.
Digest put_produced(lmdb::Txn& txn, MDB_dbi blobs, const std::string& what,
                    const Producer& produce);

// Stores a file's content through put_produced, reading it in 1 MiB chunks.
// Throws SystemError if the file cannot be opened or read, and StoreError if
// it changed while it was being stored.
Digest put_file(lmdb::Txn& txn, MDB_dbi blobs, const std::filesystem::path& file);

}  // namespace forktrial::store::blob
