// Blobs clients are uploading, chunk by chunk: spilled to files under the
// coordinator's store directory as they arrive, never held in memory, hashed
// as they come, and bounded so that no client can make the coordinator hold
// more than its share (docs/cluster.md, "Peers that cannot be trusted").
//
// A client is named by its key (with CurveZMQ) or its connection. An upload
// starts with the chunk at offset 0, which declares the blob's size; it is
// refused when the blob is past the limit, when the client already has that
// many uploads in progress or would pass its share of declared bytes, or
// when every upload in progress together would pass the overall limit (then
// the client may send it again later). An upload not added to for
// `idle_timeout` is dropped, and its file removed.
//
// Single-threaded: the coordinator's loop owns it. Time comes in as `now`.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "coordinator/ids.h"

namespace forktrial::coordinator {

struct UploadLimits {
  std::uint64_t max_blob = std::uint64_t{1} << 30;    // one blob's declared size
  std::uint64_t per_client = std::uint64_t{2} << 30;  // one client's uploads in progress
  std::uint64_t overall = std::uint64_t{8} << 30;     // every client's
  std::size_t per_client_uploads = 8;
  Duration idle_timeout{60'000};
};

class UploadSpool {
 public:
  // Spools under `dir`, created if needed; what a previous process left
  // there is removed.
  UploadSpool(std::filesystem::path dir, UploadLimits limits = {});
  ~UploadSpool();
  UploadSpool(const UploadSpool&) = delete;
  UploadSpool& operator=(const UploadSpool&) = delete;

  // A chunk of the blob `digest` of `client`, `bytes` at `offset` of its
  // `total`. Returns the file holding the whole blob once its last chunk
  // came and it hashed to `digest` (the caller stores it, then calls
  // `done`), nullopt while chunks are missing. A chunk out of order
  // (failed_precondition), one past a limit (resource_exhausted), past the
  // room of all uploads or failing to spool (unavailable: send it again
  // later), or a blob that does not hash to `digest` (invalid_argument) drops
  // the upload and is refused.
  std::expected<std::optional<std::filesystem::path>, Status> add(
      const std::string& client, const Digest& digest, std::uint64_t total, std::uint64_t offset,
      std::span<const std::byte> bytes, Instant now);

  // The caller stored the blob of `file`: removes it.
  void done(const std::filesystem::path& file);

  // Drops the uploads idle for idle_timeout at `now`; one line for each,
  // naming its client and how far it came.
  std::vector<std::string> expire(Instant now);

  std::size_t uploads() const { return parts_.size(); }
  std::uint64_t declared_bytes() const { return declared_; }  // of the uploads in progress

 private:
  struct Part {
    std::filesystem::path file;
    int fd = -1;
    std::uint64_t total = 0;
    std::uint64_t written = 0;
    Sha256 hash;
    Instant last;
  };
  using Key = std::pair<std::string, Digest>;
  void drop(std::map<Key, Part>::iterator part);
  std::expected<void, Status> admit(const std::string& client, std::uint64_t total) const;

  std::filesystem::path dir_;
  UploadLimits limits_;
  std::map<Key, Part> parts_;
  std::uint64_t declared_ = 0;
  std::uint64_t next_file_ = 0;
};

}  // namespace forktrial::coordinator
