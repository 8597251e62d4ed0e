// The segment format (docs/store-format.md, "Segments"): the canonical
// serialization of a history prefix, seqs 1..n, the seed of a trial's scratch
// store. Private to the store, which reads the events out of its tables and
// writes them into its tables; this file knows only the bytes of a segment.
//
//   magic "FTSEGMT1" (kSegmentMagic) ‖ n, u64 big-endian ‖
//   n times: length u64 ‖ the event's stored value (canonical Cap'n Proto)
//
// Thread-safety: a SegmentWriter or SegmentReader belongs to one thread at a
// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/error.h"
#include "store/codec.h"
#include "store/event.h"

namespace forktrial::store {

// Writes a segment to a sink, chunk by chunk, around event values given in
// seq order. The constructor writes the header.
class SegmentWriter {
 public:
  using Sink = std::function<void(std::span<const std::byte>)>;

  // `run` names the run the events come from in errors; `count` is n. The
  // sink is referenced, not copied: it must outlive the writer.
  SegmentWriter(std::string_view run, std::uint64_t count, const Sink& sink);

  // The stored value of the event at `seq`, at most `count` of them. Throws
  // StoreError ("the store is corrupt") unless `seq` is the next one (1, 2, ...).
  void add(std::uint64_t seq, std::span<const std::byte> value);
  // Throws StoreError unless all `count` events were added.
  void finish() const;

 private:
  std::string run_;
  std::uint64_t count_;
  const Sink& sink_;
  std::uint64_t next_ = 1;
};

// One event read out of a segment: its seq, its value (a view into the
// segment's bytes) and the value decoded, all checked.
struct SegmentEvent {
  std::uint64_t seq = 0;
  std::span<const std::byte> value;
  EventView view;  // valid until the reader's next call to next()
};

// Reads a segment, checking every byte of it: the magic, every length, that
// each event decodes, is canonical, carries the expected seq and follows the
// text rule (store/event.h), and that no bytes follow the last event. Errors
// are the reason, for the caller to prefix ("invalid segment: ").
// Repeated event ids are not checked here: the store's id index finds them.
class SegmentReader {
 public:
  // Refuses bytes that do not begin with the magic and the count. The bytes
  // must outlive the reader.
  static std::expected<SegmentReader, Status> open(std::span<const std::byte> bytes);

  std::uint64_t count() const { return count_; }
  // The next event, nullopt after the last (once no bytes follow it), or why
  // the segment is invalid there.
  std::expected<std::optional<SegmentEvent>, Status> next();

 private:
  SegmentReader(std::span<const std::byte> bytes, std::uint64_t count)
      : bytes_(bytes), count_(count) {}

  std::span<const std::byte> bytes_;
  std::uint64_t count_;
  std::uint64_t seq_ = 0;    // of the last event read
  std::size_t offset_ = 16;  // of the next length
  codec::EventDecoder decoder_;
};

}  // namespace forktrial::store
