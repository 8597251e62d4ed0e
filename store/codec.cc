#include "store/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "schema/event.capnp.h"
#include "store/event_store.h"

namespace forktrial::store::codec {
namespace {

std::string_view view(capnp::Text::Reader t) {
  return {t.begin(), t.size()};
}

kj::ArrayPtr<const capnp::word> words(std::span<const std::byte> value,
                                      std::vector<capnp::word>& aligned) {
  if (value.size() % sizeof(capnp::word) != 0) {
    throw StoreError("stored record of " + std::to_string(value.size()) +
                     " bytes is not a whole number of 8-byte words; the store is corrupt");
  }
  std::size_t count = value.size() / sizeof(capnp::word);
  if (reinterpret_cast<std::uintptr_t>(value.data()) % alignof(capnp::word) == 0) {
    return {reinterpret_cast<const capnp::word*>(value.data()), count};
  }
  aligned.resize(count);
  std::memcpy(aligned.data(), value.data(), value.size());
  return {aligned.data(), count};
}

}  // namespace

void put_u64(std::byte* out, std::uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<std::byte>(value & 0xff);
    value >>= 8;
  }
}

std::uint64_t get_u64(const std::byte* in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | std::to_integer<std::uint64_t>(in[i]);
  return value;
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

std::vector<std::byte> event_id_key(std::uint64_t run_number, std::string_view event_id) {
  std::vector<std::byte> key(8 + event_id.size());
  put_u64(key.data(), run_number);
  std::memcpy(key.data() + 8, event_id.data(), event_id.size());
  return key;
}

kj::Array<capnp::word> encode_event(const NewEvent& event, std::uint64_t seq) {
  capnp::MallocMessageBuilder message(64);
  auto e = message.initRoot<schema::Event>();
  auto t = [](std::string_view s) { return capnp::Text::Reader(s.data(), s.size()); };
  e.setId(t(event.id.str()));
  e.setType(t(event.type));
  e.setPayload(t(event.payload));
  e.setTimestamp(t(event.timestamp));
  e.setSeq(seq);
  if (event.actor) {
    e.getActor().setActorName(t(*event.actor));
  } else {
    e.getActor().setNoActor();
  }
  if (event.frame_id) {
    e.getFrame().setFrameId(t(*event.frame_id));
  } else {
    e.getFrame().setNoFrame();
  }
  if (event.caused_by) {
    e.getCause().setCausedBy(t(event.caused_by->str()));
  } else {
    e.getCause().setNoCause();
  }
  return capnp::canonicalize(e.asReader());
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
  return capnp::canonicalize(r.asReader());
}

namespace {

RunRecord decode_run_words(std::span<const std::byte> value) {
  std::vector<capnp::word> aligned;
  kj::ArrayPtr<const capnp::word> segments[1] = {words(value, aligned)};
  capnp::SegmentArrayMessageReader message(segments);
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

EventView EventDecoder::decode(std::span<const std::byte> value) {
  return decode_impl(value, nullptr);
}

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
  capnp::SegmentArrayMessageReader message(segments);
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
