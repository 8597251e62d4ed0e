// Key and value encodings of the store's named databases, private to the
// store. docs/store-format.md is the reference for every layout here.
#pragma once

#include <capnp/common.h>
#include <kj/array.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/event.h"
#include "store/ids.h"

namespace forktrial::store::codec {

// Big-endian so LMDB's byte order sorts numerically.
void put_u64(std::byte* out, std::uint64_t value);
std::uint64_t get_u64(const std::byte* in);
std::array<std::byte, 8> u64_key(std::uint64_t value);

// events: run number ‖ seq, 16 bytes.
std::array<std::byte, 16> event_key(std::uint64_t run_number, std::uint64_t seq);
// event_ids: run number ‖ the event id in an order-preserving encoding for
// numbered ids: every maximal run of ASCII digits becomes 0x00, its length
// (one byte; runs over 255 digits are split) and the digits; the bytes 0x00
// and 0x01 become 0x01 0x01 and 0x01 0x02; other bytes stay. The encoding is
// injective, and "evt_999" < "evt_1000" in key order, so a run's ids from a
// counter arrive in increasing key order and can be appended (MDB_APPEND).
inline constexpr std::size_t kMaxEventIdKeyBytes = 8 + 2 * kMaxIdBytes + 2;
// Writes the key into `out` (kMaxEventIdKeyBytes long); returns its length.
// `event_id` must be at most kMaxIdBytes long.
std::size_t event_id_key(std::uint64_t run_number, std::string_view event_id, std::byte* out);

// The stored value of an event is its canonical Cap'n Proto encoding
// (schema::Event, a single segment without segment table). Appends are the
// store's hot path, so the encoder writes that form directly instead of going
// through a MessageBuilder and capnp::canonicalize (which cost more than the
// LMDB puts); tests/store/codec_test.cc checks it against canonicalize.
//
// The size in bytes of the encoding, a multiple of 8.
std::size_t encoded_event_size(const NewEvent& event, std::uint64_t seq);
// Writes the encoding into `out`, which holds exactly encoded_event_size()
// bytes and needs no alignment.
void encode_event(const NewEvent& event, std::uint64_t seq, std::span<std::byte> out);

// Deflated events (schema version 2, docs/store-format.md "Deflated
// events"): the tag byte, the canonical encoding's size as u32 big-endian,
// then the canonical encoding as raw deflate (RFC 1951) with the store's
// preset dictionary. No canonical encoding begins with the tag (its first
// word is a struct pointer of offset 0), so a reader tells the two apart by
// the first byte.
inline constexpr std::byte kDeflatedEventTag{0xff};
// Whether a stored value is a deflated event.
bool is_deflated_event(std::span<const std::byte> value);
// Writes the deflated form of `canonical` into `out` and returns true when it
// is smaller than `canonical`; false (out unspecified) otherwise.
bool deflate_event(std::span<const std::byte> canonical, std::vector<std::byte>& out);
// The canonical encoding of a stored value: the value itself, or a deflated
// event inflated into `buffer`. Throws StoreError when it does not inflate to
// the size it states.
std::span<const std::byte> canonical_event(std::span<const std::byte> value,
                                           std::vector<std::byte>& buffer);

// A run record as stored, plus the store-internal run number.
struct RunRecord {
  RunId id;
  std::string label;
  std::string created_at;
  std::uint64_t number = 0;
  std::optional<ForkPoint> fork_of;
  std::optional<std::string> goal;
  std::optional<std::string> frame_id;
  std::string owner;  // "" (not stored): every client may fork it
  std::optional<Digest> source;
};
kj::Array<capnp::word> encode_run(const RunRecord& record);
RunRecord decode_run(std::span<const std::byte> value);

// Decodes stored event values, canonical or deflated.
//
// decode() reads the layout the encoder writes (schema::Event in canonical
// form, whatever the alignment) directly, checking every pointer against the
// value's bounds; anything else (a far pointer, sections of a newer schema,
// an unexpected union tag) goes through Cap'n Proto's checked reader. The
// reader needs word alignment, so unaligned values are then copied into a
// buffer the decoder owns. The returned views point into `value` or into
// that buffer: valid while `value` is and until the next decode(). A decoder
// belongs to one thread at a time; the encoding functions are stateless.
class EventDecoder {
 public:
  // Throws StoreError for a value that is not a valid encoded event.
  EventView decode(std::span<const std::byte> value);
  // Decodes with Cap'n Proto's reader only, and also reports whether the
  // value is in canonical form.
  EventView decode_checked(std::span<const std::byte> value, bool& canonical);

 private:
  EventView decode_impl(std::span<const std::byte> value, bool* canonical);
  EventView decode_words(std::span<const std::byte> value, bool* canonical);
  // Not a std::vector: capnp::word cannot be copied or moved, which
  // std::vector<capnp::word>::resize needs under clang.
  kj::Array<capnp::word> aligned_;
  std::vector<std::byte> inflated_;  // the last deflated value, inflated
};

}  // namespace forktrial::store::codec
