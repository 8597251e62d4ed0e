#include "worker/blob_assembly.h"

#include <algorithm>
#include <cstring>

namespace forktrial::worker {

std::expected<BlobAssembly, Status> BlobAssembly::start(const Digest& expected,
                                                        std::uint64_t total_size,
                                                        std::uint64_t max_size) {
  if (total_size > max_size) {
    return std::unexpected(Status{ErrorCode::resource_exhausted,
                                  "blob " + expected.str() + " announced as " +
                                      std::to_string(total_size) + " bytes exceeds the limit of " +
                                      std::to_string(max_size) + " bytes"});
  }
  return BlobAssembly(expected, std::string(static_cast<std::size_t>(total_size), '\0'));
}

std::expected<void, Status> BlobAssembly::add(std::uint64_t offset, std::string_view chunk) {
  const std::uint64_t total = bytes_.size();
  const std::string where = "chunk of blob " + expected_.str() + " at offset " +
                            std::to_string(offset) + " (" + std::to_string(chunk.size()) +
                            " bytes)";
  if (chunk.empty())
    return std::unexpected(Status{ErrorCode::invalid_argument, where + " is empty"});
  if (chunk.size() > kMaxChunk) {
    return std::unexpected(Status{
        ErrorCode::invalid_argument,
        where + " is larger than the chunk limit of " + std::to_string(kMaxChunk) + " bytes"});
  }
  // Written so that no sum can wrap: offset <= total first.
  if (offset > total || chunk.size() > total - offset) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument,
               where + " ends past the blob's " + std::to_string(total) + " bytes"});
  }
  const std::uint64_t end = offset + chunk.size();
  // Every received range that overlaps [offset, end) must hold the same bytes.
  auto first = ranges_.upper_bound(offset);
  if (first != ranges_.begin() && std::prev(first)->second > offset) --first;
  auto last = first;
  for (; last != ranges_.end() && last->first < end; ++last) {
    const std::uint64_t from = std::max(offset, last->first);
    const std::uint64_t to = std::min(end, last->second);
    if (std::memcmp(bytes_.data() + from, chunk.data() + (from - offset), to - from) != 0) {
      return std::unexpected(Status{ErrorCode::invalid_argument,
                                    where + " disagrees with the bytes already received for [" +
                                        std::to_string(from) + ", " + std::to_string(to) + ")"});
    }
  }
  std::memcpy(bytes_.data() + offset, chunk.data(), chunk.size());
  // Merge [offset, end) with the overlapping and adjacent ranges.
  std::uint64_t merged_start = offset;
  std::uint64_t merged_end = end;
  auto begin = first;
  if (begin != ranges_.begin() && std::prev(begin)->second == offset) --begin;
  if (last != ranges_.end() && last->first == end) ++last;
  for (auto it = begin; it != last; ++it) {
    merged_start = std::min(merged_start, it->first);
    merged_end = std::max(merged_end, it->second);
    received_ -= it->second - it->first;
  }
  ranges_.erase(begin, last);
  ranges_[merged_start] = merged_end;
  received_ += merged_end - merged_start;
  return {};
}

std::expected<std::string, Status> BlobAssembly::finish() && {
  if (!complete()) {
    std::uint64_t gap = 0;
    if (!ranges_.empty() && ranges_.begin()->first == 0) gap = ranges_.begin()->second;
    return std::unexpected(
        Status{ErrorCode::failed_precondition,
               "blob " + expected_.str() + " is incomplete: " + std::to_string(received_) + " of " +
                   std::to_string(bytes_.size()) + " bytes received, the first missing at offset " +
                   std::to_string(gap)});
  }
  const Digest actual = Sha256::of(bytes_);
  if (actual != expected_) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument, "the " + std::to_string(bytes_.size()) +
                                                " bytes assembled for blob " + expected_.str() +
                                                " hash to " + actual.str() + "; fetch it again"});
  }
  return std::move(bytes_);
}

}  // namespace forktrial::worker
