#include "store/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <zlib.h>

#include <bit>
#include <cstring>
#include <memory>

#include "schema/event.capnp.h"
#include "store/event_store.h"

namespace forktrial::store::codec {
namespace {

// Reading a stored value visits each of its words a few times at most, so
// the traversal limit follows its size (Cap'n Proto's default, 64 MiB, would
// refuse a larger record the store took, a job of a million trials).
capnp::ReaderOptions reader_options(std::size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words * 4 + 1024;
  return options;
}

std::string_view view(capnp::Text::Reader t) {
  return {t.begin(), t.size()};
}

kj::ArrayPtr<const capnp::word> words(std::span<const std::byte> value,
                                      kj::Array<capnp::word>& aligned) {
  if (value.size() % sizeof(capnp::word) != 0) {
    throw StoreError("stored record of " + std::to_string(value.size()) +
                     " bytes is not a whole number of 8-byte words; the store is corrupt");
  }
  std::size_t count = value.size() / sizeof(capnp::word);
  // An empty value may sit anywhere, or nowhere: memcpy may not take null.
  if (count == 0) return {};
  if (reinterpret_cast<std::uintptr_t>(value.data()) % alignof(capnp::word) == 0) {
    return {reinterpret_cast<const capnp::word*>(value.data()), count};
  }
  if (aligned.size() < count) aligned = kj::heapArray<capnp::word>(count);
  std::memcpy(aligned.begin(), value.data(), value.size());
  return {aligned.begin(), count};
}

}  // namespace

void put_u64(std::byte* out, std::uint64_t value) {
  static_assert(std::endian::native == std::endian::little);
  value = std::byteswap(value);
  std::memcpy(out, &value, 8);
}

std::uint64_t get_u64(const std::byte* in) {
  std::uint64_t value;
  std::memcpy(&value, in, 8);
  return std::byteswap(value);
}

std::array<std::byte, 8> u64_key(std::uint64_t value) {
  std::array<std::byte, 8> key;
  put_u64(key.data(), value);
  return key;
}

std::array<std::byte, 16> event_key(std::uint64_t run_number, std::uint64_t seq) {
  std::array<std::byte, 16> key;
  put_u64(key.data(), run_number);
  put_u64(key.data() + 8, seq);
  return key;
}

std::size_t event_id_key(std::uint64_t run_number, std::string_view event_id, std::byte* out) {
  put_u64(out, run_number);
  std::size_t n = 8;
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  for (std::size_t i = 0; i < event_id.size();) {
    char c = event_id[i];
    if (is_digit(c)) {
      std::size_t end = i;
      while (end < event_id.size() && end - i < 255 && is_digit(event_id[end])) ++end;
      out[n++] = std::byte{0x00};
      out[n++] = static_cast<std::byte>(end - i);
      std::memcpy(out + n, event_id.data() + i, end - i);
      n += end - i;
      i = end;
    } else if (c == '\0' || c == '\1') {
      out[n++] = std::byte{0x01};
      out[n++] = static_cast<std::byte>(c + 1);
      ++i;
    } else {
      out[n++] = static_cast<std::byte>(c);
      ++i;
    }
  }
  return n;
}

namespace {

// schema::Event's layout, as `capnp compile -ocapnp schema/event.capnp`
// prints it: two data words (seq; the three union tags as 16-bit values at
// bits 64, 80 and 96) and seven pointers (id, type, payload, timestamp,
// actorName, frameId, causedBy).
constexpr std::size_t kEventPointers = 7;

std::size_t text_words(std::size_t length) {
  return (length + 1 + 7) / 8;
}

struct EventTexts {
  std::array<const std::string*, kEventPointers> text{};
  std::size_t pointers = 0;    // after dropping trailing null pointers
  std::size_t data_words = 0;  // after dropping trailing zero words
  std::uint64_t tags = 0;
};

EventTexts texts_of(const NewEvent& e, std::uint64_t seq) {
  EventTexts t;
  t.text = {&e.id.str(),
            &e.type,
            &e.payload,
            &e.timestamp,
            e.actor ? &*e.actor : nullptr,
            e.frame_id ? &*e.frame_id : nullptr,
            e.caused_by ? &e.caused_by->str() : nullptr};
  t.tags = (e.actor ? std::uint64_t{1} : 0) | (e.frame_id ? std::uint64_t{1} << 16 : 0) |
           (e.caused_by ? std::uint64_t{1} << 32 : 0);
  t.data_words = t.tags != 0 ? 2 : (seq != 0 ? 1 : 0);
  for (std::size_t i = 0; i < kEventPointers; ++i) {
    if (t.text[i] != nullptr) t.pointers = i + 1;
  }
  return t;
}

void put_le64(std::byte* out, std::uint64_t value) {
  static_assert(std::endian::native == std::endian::little,
                "the event encoder writes Cap'n Proto's little-endian words with memcpy");
  std::memcpy(out, &value, 8);
}

}  // namespace

std::size_t encoded_event_size(const NewEvent& event, std::uint64_t seq) {
  EventTexts t = texts_of(event, seq);
  std::size_t words = 1 + t.data_words + t.pointers;
  for (std::size_t i = 0; i < t.pointers; ++i) {
    if (t.text[i] != nullptr) words += text_words(t.text[i]->size());
  }
  return words * 8;
}

void encode_event(const NewEvent& event, std::uint64_t seq, std::span<std::byte> out) {
  EventTexts t = texts_of(event, seq);
  std::memset(out.data(), 0, out.size());
  // Root pointer: a struct pointer with offset 0 and the section sizes.
  put_le64(out.data(), (std::uint64_t{t.data_words} << 32) | (std::uint64_t{t.pointers} << 48));
  std::size_t word = 1;
  if (t.data_words >= 1) put_le64(out.data() + 8 * word, seq);
  if (t.data_words >= 2) put_le64(out.data() + 8 * (word + 1), t.tags);
  word += t.data_words;
  std::size_t pointer_word = word;
  std::size_t content_word = word + t.pointers;
  for (std::size_t i = 0; i < t.pointers; ++i, ++pointer_word) {
    const std::string* text = t.text[i];
    if (text == nullptr) continue;  // a null pointer is an all-zero word
    // List pointer: tag 1, offset from the end of the pointer word, element
    // size 2 (bytes), element count = length + NUL.
    std::uint64_t offset = content_word - (pointer_word + 1);
    put_le64(out.data() + 8 * pointer_word, 1 | (offset << 2) | (std::uint64_t{2} << 32) |
                                                (std::uint64_t(text->size() + 1) << 35));
    std::memcpy(out.data() + 8 * content_word, text->data(), text->size());
    content_word += text_words(text->size());
  }
}

kj::Array<capnp::word> encode_run(const RunRecord& record) {
  capnp::MallocMessageBuilder message(64);
  auto r = message.initRoot<schema::RunRecord>();
  auto t = [](std::string_view s) { return capnp::Text::Reader(s.data(), s.size()); };
  r.setId(t(record.id.str()));
  r.setLabel(t(record.label));
  r.setCreatedAt(t(record.created_at));
  r.setNumber(record.number);
  if (record.fork_of) {
    auto f = r.getLineage().initForkOf();
    f.setParentRun(t(record.fork_of->parent.str()));
    f.setEventId(t(record.fork_of->event_id.str()));
    f.setSeq(record.fork_of->seq);
  } else {
    r.getLineage().setRoot();
  }
  if (record.goal) {
    r.getGoal().setGoalText(t(*record.goal));
  } else {
    r.getGoal().setNoGoal();
  }
  if (record.frame_id) {
    r.getFrame().setFrameId(t(*record.frame_id));
  } else {
    r.getFrame().setNoFrame();
  }
  // Unset when empty, so that a run without them is stored as it always was.
  if (!record.owner.empty()) r.setOwner(t(record.owner));
  if (record.source) {
    const auto& bytes = record.source->bytes();
    r.setSource(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  }
  return capnp::canonicalize(r.asReader());
}

namespace {

RunRecord decode_run_words(std::span<const std::byte> value) {
  kj::Array<capnp::word> aligned;
  kj::ArrayPtr<const capnp::word> segments[1] = {words(value, aligned)};
  capnp::SegmentArrayMessageReader message(segments, reader_options(segments[0].size()));
  auto r = message.getRoot<schema::RunRecord>();
  RunRecord record;
  record.id = RunId(std::string(view(r.getId())));
  record.label = std::string(view(r.getLabel()));
  record.created_at = std::string(view(r.getCreatedAt()));
  record.number = r.getNumber();
  if (r.getLineage().isForkOf()) {
    auto f = r.getLineage().getForkOf();
    record.fork_of = ForkPoint{RunId(std::string(view(f.getParentRun()))),
                               EventId(std::string(view(f.getEventId()))), f.getSeq()};
  }
  if (r.getGoal().isGoalText()) record.goal = std::string(view(r.getGoal().getGoalText()));
  if (r.getFrame().isFrameId()) record.frame_id = std::string(view(r.getFrame().getFrameId()));
  record.owner = std::string(view(r.getOwner()));
  if (r.hasSource()) {
    const auto source = r.getSource();
    if (source.size() != Digest::kSize) {
      throw StoreError("stored run record " + record.id.str() + " has a source of " +
                       std::to_string(source.size()) + " bytes, not a digest");
    }
    std::array<std::uint8_t, Digest::kSize> bytes{};
    std::copy(source.begin(), source.end(), bytes.begin());
    record.source = Digest(bytes);
  }
  return record;
}

}  // namespace

RunRecord decode_run(std::span<const std::byte> value) {
  try {
    return decode_run_words(value);
  } catch (const kj::Exception& e) {
    throw StoreError("stored run record does not decode: " +
                     std::string(e.getDescription().cStr()));
  }
}

namespace {

std::uint64_t get_le64(const std::byte* in) {
  std::uint64_t value;
  std::memcpy(&value, in, 8);
  return value;
}

// Reads text pointer `index` of the struct whose pointer section starts at
// word `pointers` (of `count` pointers); a null or absent pointer reads as
// "". Returns false for anything the fast path does not handle.
bool read_text(std::span<const std::byte> value, std::size_t pointers, std::size_t count,
               std::size_t index, std::string_view& out) {
  out = {};
  if (index >= count) return true;
  std::size_t at = pointers + index;
  std::uint64_t pointer = get_le64(value.data() + 8 * at);
  if (pointer == 0) return true;
  if ((pointer & 3) != 1 || ((pointer >> 32) & 7) != 2) return false;  // a byte list
  auto offset = static_cast<std::int32_t>(static_cast<std::uint32_t>(pointer)) >> 2;
  std::uint64_t length = pointer >> 35;  // bytes, NUL included
  std::int64_t start = static_cast<std::int64_t>(at) + 1 + offset;
  std::int64_t words = static_cast<std::int64_t>(value.size() / 8);
  if (length == 0 || start < 0 || start >= words ||
      length > static_cast<std::uint64_t>(words - start) * 8) {
    return false;
  }
  const char* text = reinterpret_cast<const char*>(value.data()) + 8 * start;
  if (text[length - 1] != '\0') return false;
  out = {text, length - 1};
  return true;
}

bool fast_decode(std::span<const std::byte> value, EventView& v) {
  if (value.size() < 8 || value.size() % 8 != 0) return false;
  std::uint64_t root = get_le64(value.data());
  std::size_t data_words = (root >> 32) & 0xffff;
  std::size_t pointers = root >> 48;
  if ((root & 0xffffffff) != 0 || data_words > 2 || pointers > kEventPointers ||
      1 + data_words + pointers > value.size() / 8) {
    return false;
  }
  v.seq = data_words >= 1 ? get_le64(value.data() + 8) : 0;
  std::uint64_t tags = data_words >= 2 ? get_le64(value.data() + 16) : 0;
  if ((tags & ~std::uint64_t{0x0000'0001'0001'0001}) != 0) return false;
  std::size_t first = 1 + data_words;
  std::string_view optional_text;
  if (!read_text(value, first, pointers, 0, v.id) ||
      !read_text(value, first, pointers, 1, v.type) ||
      !read_text(value, first, pointers, 2, v.payload) ||
      !read_text(value, first, pointers, 3, v.timestamp)) {
    return false;
  }
  v.actor.reset();
  v.frame_id.reset();
  v.caused_by.reset();
  std::optional<std::string_view>* optionals[3] = {&v.actor, &v.frame_id, &v.caused_by};
  for (std::size_t i = 0; i < 3; ++i) {
    if (((tags >> (16 * i)) & 1) == 0) continue;
    if (!read_text(value, first, pointers, 4 + i, optional_text)) return false;
    *optionals[i] = optional_text;
  }
  return true;
}

}  // namespace

namespace {

// The preset dictionary of deflated events: what the runtime's events share
// (a Cap'n Proto Event's first word, ids, timestamps, actors, the types and
// payload keys of the events every trial appends), the most common last,
// nearest to the data. Part of the format: a value deflated with it must
// inflate with it for ever, so it never changes (another dictionary would
// take another tag).
constexpr char kEventDictionaryText[] =
    "\0\0\0\0\2\0\7\0\0\0\0\0\0\0\0\0\1\0\0\0\1\0\0\0"
    "object.created\0relation.created\0patch.proposed\0patch.applied\0patch.rejected\0"
    "runtime.idle\0pack.loaded\0chat.message\0behavior.failed\0trial.replay\0"
    "{\"object\":{\"data\":{},\"id\":\"\",\"provenance\":{\"caused_by_event\":\"evt_\","
    "\"created_by\":\"\",\"evidence\":[],\"frame_id\":null,\"timestamp\":\"\"},\"type\":\"\","
    "\"version\":1}}\0"
    "{\"behavior\":\"\",\"error\":\"\",\"event_id\":\"evt_\"}\0"
    "{\"text\":\"\"}\0{\"n\":1}\0"
    "behavior.started\0\0\0\0\0\0\0\0"
    "{\"behavior\":\"\",\"event_id\":\"evt_\",\"triggering_event_type\":\"\","
    "\"triggering_object_id\":null}\0\0\0\0\0\0\0\0"
    "behavior.completed\0\0\0\0\0\0"
    "{\"behavior\":\"\",\"event_id\":\"evt_\",\"events_emitted\":1,\"objects_created\":0,"
    "\"patches_applied\":0,\"patches_proposed\":0,\"relations_created\":0}\0\0\0\0\0"
    "2026-01-01T00:00:00.000Z\0\0\0\0\0\0\0\0runtime\0evt_001\0evt_001\0";

// The dictionary: the text above, then the canonical encodings of a
// behavior.started and a behavior.completed event of a behavior "x.y" (seq
// 1, ids evt_001), whose pointer and data words match those of the
// runtime's events of the same shapes. Canonical encodings are fixed by
// Cap'n Proto's specification, so these bytes are as fixed as the text.
const std::string& event_dictionary() {
  static const std::string dictionary = [] {
    std::string text(kEventDictionaryText, sizeof kEventDictionaryText - 1);
    NewEvent started;
    started.id = EventId("evt_001");
    started.type = "behavior.started";
    started.payload = R"({"behavior":"x.y","event_id":"evt_001","triggering_event_type":"ping",)"
                      R"("triggering_object_id":null})";
    started.timestamp = "2026-01-05T09:00:07Z";
    started.actor = "runtime";
    started.caused_by = EventId("evt_001");
    NewEvent completed = started;
    completed.type = "behavior.completed";
    completed.payload =
        R"({"behavior":"x.y","event_id":"evt_001","events_emitted":1,"objects_created":0,)"
        R"("patches_applied":0,"patches_proposed":0,"relations_created":0})";
    for (const NewEvent* event : {&started, &completed}) {
      std::vector<std::byte> encoded(encoded_event_size(*event, 1));
      encode_event(*event, 1, encoded);
      text.append(reinterpret_cast<const char*>(encoded.data()), encoded.size());
    }
    return text;
  }();
  return dictionary;
}

constexpr std::size_t kDeflatedHeader = 5;  // the tag and the size

// One zlib stream per thread and direction, reset for each value: setting
// one up allocates its window and hash tables, which would cost more than
// deflating an event.
struct Deflater {
  z_stream stream{};
  bool ready = false;
  Deflater() {
    // Level 6, a 32 KiB window (raw: no zlib header or checksum, the store's
    // own size check stands for them), memory level 8.
    ready = deflateInit2(&stream, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK;
  }
  ~Deflater() {
    if (ready) deflateEnd(&stream);
  }
};
struct Inflater {
  z_stream stream{};
  bool ready = false;
  Inflater() { ready = inflateInit2(&stream, -15) == Z_OK; }
  ~Inflater() {
    if (ready) inflateEnd(&stream);
  }
};

Bytef* dictionary_bytes() {
  return reinterpret_cast<Bytef*>(const_cast<char*>(event_dictionary().data()));
}

uInt dictionary_size() {
  return static_cast<uInt>(event_dictionary().size());
}

}  // namespace

bool is_deflated_event(std::span<const std::byte> value) {
  return !value.empty() && value[0] == kDeflatedEventTag;
}

bool deflate_event(std::span<const std::byte> canonical, std::vector<std::byte>& out) {
  if (canonical.size() <= kDeflatedHeader || canonical.size() > 0xffffffffu) return false;
  thread_local Deflater deflater;
  if (!deflater.ready) return false;
  z_stream& z = deflater.stream;
  if (deflateReset(&z) != Z_OK ||
      deflateSetDictionary(&z, dictionary_bytes(), dictionary_size()) != Z_OK) {
    return false;
  }
  // Only a smaller form is kept, so the output never needs more room than
  // the input.
  out.resize(canonical.size());
  const auto size = static_cast<std::uint32_t>(canonical.size());
  out[0] = kDeflatedEventTag;
  for (int i = 0; i < 4; ++i) out[1 + i] = std::byte(size >> (24 - 8 * i));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(canonical.data()));
  z.avail_in = static_cast<uInt>(canonical.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data() + kDeflatedHeader);
  z.avail_out = static_cast<uInt>(out.size() - kDeflatedHeader);
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) return false;  // no smaller
  out.resize(out.size() - z.avail_out);
  return true;
}

std::span<const std::byte> canonical_event(std::span<const std::byte> value,
                                           std::vector<std::byte>& buffer) {
  if (!is_deflated_event(value)) return value;
  if (value.size() < kDeflatedHeader) throw StoreError("stored event is cut short");
  std::uint32_t size = 0;
  for (int i = 0; i < 4; ++i) size = size << 8 | std::to_integer<std::uint32_t>(value[1 + i]);
  // Deflate expands at most about 1,032 times: a larger size is a corrupt
  // value, which must not make the reader allocate it.
  if (size > (value.size() - kDeflatedHeader) * 1032 + 64) {
    throw StoreError("stored event states an inflated size of " + std::to_string(size) +
                     " bytes, more than its " + std::to_string(value.size()) +
                     " bytes can hold; the store is corrupt");
  }
  thread_local Inflater inflater;
  if (!inflater.ready) throw StoreError("cannot set up zlib to inflate a stored event");
  z_stream& z = inflater.stream;
  buffer.resize(size);
  inflateReset(&z);
  if (inflateSetDictionary(&z, dictionary_bytes(), dictionary_size()) != Z_OK) {
    throw StoreError("cannot set the dictionary to inflate a stored event");
  }
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(value.data() + kDeflatedHeader));
  z.avail_in = static_cast<uInt>(value.size() - kDeflatedHeader);
  z.next_out = reinterpret_cast<Bytef*>(buffer.data());
  z.avail_out = size;
  const int rc = inflate(&z, Z_FINISH);
  if (rc != Z_STREAM_END || z.avail_out != 0 || z.avail_in != 0) {
    throw StoreError("stored event does not inflate to the " + std::to_string(size) +
                     " bytes it states; the store is corrupt");
  }
  return buffer;
}

EventView EventDecoder::decode(std::span<const std::byte> value) {
  value = canonical_event(value, inflated_);
  EventView v;
  if (fast_decode(value, v)) return v;
  return decode_impl(value, nullptr);
}

// A deflated value is not a canonical encoding: Cap'n Proto's reader
// refuses it (its root is no struct), as a segment must.
EventView EventDecoder::decode_checked(std::span<const std::byte> value, bool& canonical) {
  return decode_impl(value, &canonical);
}

EventView EventDecoder::decode_impl(std::span<const std::byte> value, bool* canonical) {
  try {
    return decode_words(value, canonical);
  } catch (const kj::Exception& e) {
    throw StoreError("stored event does not decode: " + std::string(e.getDescription().cStr()));
  }
}

EventView EventDecoder::decode_words(std::span<const std::byte> value, bool* canonical) {
  kj::ArrayPtr<const capnp::word> segments[1] = {words(value, aligned_)};
  capnp::SegmentArrayMessageReader message(segments, reader_options(segments[0].size()));
  auto e = message.getRoot<schema::Event>();
  EventView v;
  v.id = view(e.getId());
  v.type = view(e.getType());
  v.payload = view(e.getPayload());
  v.timestamp = view(e.getTimestamp());
  v.seq = e.getSeq();
  if (e.getActor().isActorName()) v.actor = view(e.getActor().getActorName());
  if (e.getFrame().isFrameId()) v.frame_id = view(e.getFrame().getFrameId());
  if (e.getCause().isCausedBy()) v.caused_by = view(e.getCause().getCausedBy());
  if (canonical != nullptr) *canonical = message.isCanonical();
  return v;
}

}  // namespace forktrial::store::codec
