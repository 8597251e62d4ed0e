// A blob received in chunks: the coordinator sends a pack archive or a
// history segment as chunks of at most 1 MiB at byte offsets, and the worker
// assembles them here before putting the whole into its BlobCache.
//
// The peer is untrusted: a chunk that is empty, larger than kMaxChunk, out of
// the blob's range, or that disagrees with bytes already received for the same
// range is refused (a retransmitted chunk with the same bytes is accepted).
// The bytes are handed out only once every byte has arrived and they hash to
// the expected digest. The whole blob is held in memory, allocated at start()
// after its size is checked against the caller's bound.
//
// Thread-safety: none; one assembly belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <string>
#include <string_view>

#include "base/digest.h"
#include "base/error.h"

namespace forktrial::worker {

class BlobAssembly {
 public:
  static constexpr std::size_t kMaxChunk = std::size_t{1} << 20;

  // An assembly of `total_size` bytes that must hash to `expected`. Refuses
  // (resource_exhausted) a total size above `max_size`, such as the cache's
  // byte cap.
  static std::expected<BlobAssembly, Status> start(const Digest& expected, std::uint64_t total_size,
                                                   std::uint64_t max_size);

  // Takes `chunk`, the bytes at `offset`. Errors are invalid_argument; a
  // refused chunk changes nothing.
  std::expected<void, Status> add(std::uint64_t offset, std::string_view chunk);

  const Digest& expected() const { return expected_; }
  std::uint64_t total_size() const { return bytes_.size(); }
  std::uint64_t received() const { return received_; }
  bool complete() const { return received_ == bytes_.size(); }

  // The blob, once complete and matching the digest. Errors:
  // failed_precondition while bytes are missing (naming the first gap),
  // invalid_argument when the bytes hash to another digest (fetch it again).
  // Consumes the assembly whatever the outcome.
  std::expected<std::string, Status> finish() &&;

 private:
  BlobAssembly(const Digest& expected, std::string bytes)
      : expected_(expected), bytes_(std::move(bytes)) {}

  Digest expected_;
  std::string bytes_;
  std::map<std::uint64_t, std::uint64_t> ranges_;  // received [start, end), disjoint, merged
  std::uint64_t received_ = 0;
};

}  // namespace forktrial::worker
