// The store's segment format (store/segment.h) and event codec
// (store/codec.h), which read the bytes a worker is sent and the values a
// store holds.
//
// Segment: each input is read as a segment; one read whole is canonical, so
// writing its events again with SegmentWriter gives back the input's bytes.
// Codec: each input is also decoded as one stored event value, by the fast
// decoder at an aligned and at an unaligned address and by Cap'n Proto's
// checked reader: the fast decoder gives the same result at both addresses,
// and reads what the checked reader accepts alike. A value in canonical
// form, encoded again (encode_event), reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fuzz/check.h"
#include "store/codec.h"
#include "store/event_store.h"
#include "store/segment.h"

namespace store = forktrial::store;

namespace {

struct Fields {
  std::string id, type, payload, timestamp;
  std::optional<std::string> actor, frame_id, caused_by;
  std::uint64_t seq = 0;
  friend bool operator==(const Fields&, const Fields&) = default;
};

std::optional<std::string> copy(std::optional<std::string_view> text) {
  if (!text) return std::nullopt;
  return std::string(*text);
}

Fields fields_of(const store::EventView& v) {
  return Fields{
      std::string(v.id), std::string(v.type), std::string(v.payload), std::string(v.timestamp),
      copy(v.actor),     copy(v.frame_id),    copy(v.caused_by),      v.seq};
}

// The fields, or nullopt when the decoder refuses the value.
std::optional<Fields> decoded(store::codec::EventDecoder& decoder, std::span<const std::byte> value,
                              bool checked, bool* canonical = nullptr) {
  try {
    bool is_canonical = false;
    Fields f =
        fields_of(checked ? decoder.decode_checked(value, is_canonical) : decoder.decode(value));
    if (canonical) *canonical = is_canonical;
    return f;
  } catch (const store::StoreError&) {
    return std::nullopt;
  }
}

void check_segment(std::span<const std::byte> bytes) {
  auto reader = store::SegmentReader::open(bytes);
  if (!reader) return;
  std::vector<std::pair<std::uint64_t, std::span<const std::byte>>> values;
  for (;;) {
    auto next = reader->next();
    if (!next) {
      FUZZ_CHECK(!next.error().message.empty());
      return;
    }
    if (!*next) break;
    FUZZ_CHECK((*next)->seq == values.size() + 1);
    values.emplace_back((*next)->seq, (*next)->value);
  }
  FUZZ_CHECK(values.size() == reader->count());
  std::vector<std::byte> written;
  const store::SegmentWriter::Sink sink = [&](std::span<const std::byte> chunk) {
    written.insert(written.end(), chunk.begin(), chunk.end());
  };
  store::SegmentWriter writer("run_fuzz", values.size(), sink);
  for (const auto& [seq, value] : values) writer.add(seq, value);
  writer.finish();
  FUZZ_CHECK(written.size() == bytes.size());
  FUZZ_CHECK(std::memcmp(written.data(), bytes.data(), bytes.size()) == 0);
}

void check_codec(std::span<const std::byte> value) {
  store::codec::EventDecoder decoder;
  bool canonical = false;
  const auto fast = decoded(decoder, value, false);
  const auto checked = decoded(decoder, value, true, &canonical);
  // The same bytes one byte off word alignment.
  std::vector<std::byte> shifted(value.size() + 1);
  std::memcpy(shifted.data() + 1, value.data(), value.size());
  const auto unaligned = decoded(decoder, std::span(shifted).subspan(1), false);
  FUZZ_CHECK(fast == unaligned);
  // The checked decoder also walks every pointer to judge the form, so it
  // refuses a value whose unused pointer is out of bounds; what it accepts,
  // the fast decoder reads alike.
  if (checked) FUZZ_CHECK(fast == checked);
  if (!fast || !checked) return;
  if (!canonical) return;
  // Encoded again, the fields read back the same. Not always the same bytes:
  // a union tag this build does not know is canonical, and reads as absent.
  store::NewEvent event{
      store::EventId(fast->id), fast->type,  fast->payload, fast->timestamp, fast->actor,
      fast->frame_id,           std::nullopt};
  if (fast->caused_by) event.caused_by = store::EventId(*fast->caused_by);
  std::vector<std::byte> encoded(store::codec::encoded_event_size(event, fast->seq));
  store::codec::encode_event(event, fast->seq, encoded);
  FUZZ_CHECK(decoded(decoder, encoded, false) == fast);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  check_segment(bytes);
  check_codec(bytes);
  return 0;
}
