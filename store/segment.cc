#include "store/segment.h"

#include <cstring>

#include "store/event_store.h"

namespace forktrial::store {
namespace {

constexpr std::size_t kHeaderBytes = 16;  // magic ‖ count

}  // namespace

SegmentWriter::SegmentWriter(std::string_view run, std::uint64_t count, const Sink& sink)
    : run_(run), count_(count), sink_(sink) {
  std::byte header[kHeaderBytes];
  std::memcpy(header, kSegmentMagic.data(), kSegmentMagic.size());
  codec::put_u64(header + kSegmentMagic.size(), count);
  sink_(header);
}

void SegmentWriter::add(std::uint64_t seq, std::span<const std::byte> value) {
  if (seq != next_) {
    throw StoreError("run " + run_ + " has no event at seq " + std::to_string(next_) +
                     " (next stored is " + std::to_string(seq) + "); the store is corrupt");
  }
  ++next_;
  std::byte length[8];
  codec::put_u64(length, value.size());
  sink_(length);
  sink_(value);
}

void SegmentWriter::finish() const {
  if (next_ != count_ + 1) {
    throw StoreError("run " + run_ + " has " + std::to_string(next_ - 1) +
                     " events, fewer than the " + std::to_string(count_) + " the segment needs");
  }
}

std::expected<SegmentReader, Status> SegmentReader::open(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kSegmentMagic.data(), kSegmentMagic.size()) != 0) {
    return failure(ErrorCode::invalid_argument,
                   "it does not start with the magic \"" + std::string(kSegmentMagic) + "\"");
  }
  return SegmentReader(bytes, codec::get_u64(bytes.data() + kSegmentMagic.size()));
}

std::expected<std::optional<SegmentEvent>, Status> SegmentReader::next() {
  if (seq_ == count_) {
    if (offset_ != bytes_.size()) {
      return failure(ErrorCode::invalid_argument,
                     std::to_string(bytes_.size() - offset_) + " bytes follow the last event");
    }
    return std::nullopt;
  }
  const std::uint64_t seq = seq_ + 1;
  // Built only for an error: segments of a million events are read here.
  const auto which = [seq] { return "event " + std::to_string(seq); };
  if (bytes_.size() - offset_ < 8) {
    return failure(ErrorCode::invalid_argument,
                   "it ends before " + which() + " of " + std::to_string(count_));
  }
  const std::uint64_t length = codec::get_u64(bytes_.data() + offset_);
  offset_ += 8;
  if (length > bytes_.size() - offset_ || length % 8 != 0 || length == 0) {
    return failure(ErrorCode::invalid_argument,
                   which() + " has an impossible length " + std::to_string(length));
  }
  SegmentEvent event{seq, bytes_.subspan(offset_, length), {}};
  offset_ += length;
  bool canonical = false;
  try {
    event.view = decoder_.decode_checked(event.value, canonical);
  } catch (const StoreError& e) {
    return failure(ErrorCode::invalid_argument, which() + ": " + e.what());
  }
  if (!canonical)
    return failure(ErrorCode::invalid_argument, which() + " is not in canonical form");
  if (event.view.seq != seq) {
    return failure(ErrorCode::invalid_argument,
                   which() + " says it is at seq " + std::to_string(event.view.seq));
  }
  if (auto problem = event_problem(event.view.to_event()))
    return failure(ErrorCode::invalid_argument, *problem);
  seq_ = seq;
  return event;
}

}  // namespace forktrial::store
