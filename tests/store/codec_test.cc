// The hand-written event encoder against Cap'n Proto's own canonicalize().
#include "store/codec.h"

#include <capnp/message.h>
#include <kj/exception.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <span>

#include "schema/event.capnp.h"
#include "store/event_store.h"

namespace forktrial::store::codec {
namespace {

std::vector<std::byte> reference_encoding(const NewEvent& e, std::uint64_t seq) {
  capnp::MallocMessageBuilder message;
  auto b = message.initRoot<schema::Event>();
  auto t = [](const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); };
  b.setId(t(e.id.str()));
  b.setType(t(e.type));
  b.setPayload(t(e.payload));
  b.setTimestamp(t(e.timestamp));
  b.setSeq(seq);
  if (e.actor) b.getActor().setActorName(t(*e.actor));
  if (e.frame_id) b.getFrame().setFrameId(t(*e.frame_id));
  if (e.caused_by) b.getCause().setCausedBy(t(e.caused_by->str()));
  auto words = capnp::canonicalize(b.asReader());
  auto bytes = words.asBytes();
  return {reinterpret_cast<const std::byte*>(bytes.begin()),
          reinterpret_cast<const std::byte*>(bytes.end())};
}

// Cap'n Proto's checked reader, field by field: the reference decoding.
Event reference_decoding(const std::vector<std::byte>& bytes) {
  std::vector<capnp::word> words(bytes.size() / 8);
  std::memcpy(words.data(), bytes.data(), words.size() * 8);
  kj::ArrayPtr<const capnp::word> segments[1] = {{words.data(), words.size()}};
  capnp::SegmentArrayMessageReader message(segments);
  auto r = message.getRoot<schema::Event>();
  auto text = [](capnp::Text::Reader t) { return std::string(t.begin(), t.size()); };
  Event e;
  e.id = EventId(text(r.getId()));
  e.type = text(r.getType());
  e.payload = text(r.getPayload());
  e.timestamp = text(r.getTimestamp());
  e.seq = r.getSeq();
  if (r.getActor().isActorName()) e.actor = text(r.getActor().getActorName());
  if (r.getFrame().isFrameId()) e.frame_id = text(r.getFrame().getFrameId());
  if (r.getCause().isCausedBy()) e.caused_by = EventId(text(r.getCause().getCausedBy()));
  return e;
}

std::vector<std::byte> fast_encoding(const NewEvent& e, std::uint64_t seq) {
  std::vector<std::byte> out(encoded_event_size(e, seq) + 1);
  // Encode at an odd address: LMDB hands out 2-byte aligned space.
  encode_event(e, seq, std::span(out).subspan(1));
  out.erase(out.begin());
  return out;
}

TEST_CASE("the event encoder writes Cap'n Proto's canonical form", "[store][codec]") {
  std::vector<std::string> texts{
      "", "a", "1234567", "12345678", "123456789", std::string(100, 'x'), "évènement"};
  std::vector<std::uint64_t> seqs{1, 2, 255, 1ull << 40, ~0ull};
  int checked = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    for (int optional_mask = 0; optional_mask < 8; ++optional_mask) {
      for (std::uint64_t seq : seqs) {
        NewEvent e;
        e.id = EventId("evt_" + texts[i]);
        e.type = texts[(i + 1) % texts.size()];
        e.payload = texts[(i + 2) % texts.size()];
        e.timestamp = texts[(i + 3) % texts.size()];
        if ((optional_mask & 1) != 0) e.actor = texts[(i + 4) % texts.size()];
        if ((optional_mask & 2) != 0) e.frame_id = texts[(i + 5) % texts.size()];
        if ((optional_mask & 4) != 0) e.caused_by = EventId(texts[(i + 6) % texts.size()]);
        INFO("text " << i << ", optional fields " << optional_mask << ", seq " << seq);
        REQUIRE(fast_encoding(e, seq) == reference_encoding(e, seq));
        // And both decoders read the same event back.
        auto bytes = fast_encoding(e, seq);
        EventDecoder decoder;
        bool canonical = false;
        Event back = decoder.decode_checked(bytes, canonical).to_event();
        CHECK(canonical);
        CHECK(static_cast<const NewEvent&>(back) == e);
        CHECK(back.seq == seq);
        CHECK(decoder.decode(bytes).to_event() == back);
        ++checked;
      }
    }
  }
  CHECK(checked == 7 * 8 * 5);
}

std::string id_key(std::string_view id, std::uint64_t run = 7) {
  std::byte out[kMaxEventIdKeyBytes];
  std::size_t n = event_id_key(run, id, out);
  REQUIRE(n <= kMaxEventIdKeyBytes);
  return std::string(reinterpret_cast<const char*>(out), n);
}

TEST_CASE("event-id keys sort counter ids numerically", "[store][codec]") {
  for (const char* format : {"evt_%d", "evt_%03d", "%d", "frame-%d-x"}) {
    std::string previous;
    for (int n = 0; n < 20000; ++n) {
      char id[32];
      std::snprintf(id, sizeof id, format, n);
      std::string key = id_key(id);
      INFO(format << " " << n);
      if (n > 0) REQUIRE(previous < key);
      previous = key;
    }
  }
  CHECK(id_key("evt_999") < id_key("evt_1000"));
  CHECK(id_key("evt_1", 1) < id_key("evt_0", 2));  // the run number comes first
}

TEST_CASE("event-id keys are distinct for distinct ids and bounded in size", "[store][codec]") {
  using namespace std::string_literals;
  std::vector<std::string> ids{""s,     "1"s,     "01"s,        "001"s,       "a1"s,   "a01"s,
                               "a\0"s,  "a\1"s,   "a\1\2"s,     "a\2"s,       "\0\1"s, "\1\0"s,
                               "1a"s,   "1\0"s,   "12"s,        "1\x00\x02"s, "x"s,    "x0y"s,
                               "x00y"s, "x0\0y"s, "x\x01\x01"s, "\x01\x02"s};
  ids.push_back(std::string(300, '7'));  // a digit run longer than 255
  ids.push_back(std::string(255, '7') + "\0"s + std::string(45, '7'));
  std::set<std::string> keys;
  for (const auto& id : ids) keys.insert(id_key(id));
  CHECK(keys.size() == ids.size());

  std::string worst;
  for (std::size_t i = 0; i < kMaxIdBytes; ++i) worst += (i % 2 == 0) ? '1' : 'a';
  CHECK(id_key(worst).size() <= kMaxEventIdKeyBytes);
  CHECK(id_key(std::string(kMaxIdBytes, '\0')).size() <= kMaxEventIdKeyBytes);
  CHECK(id_key(std::string(kMaxIdBytes, '9')).size() <= kMaxEventIdKeyBytes);
  CHECK(kMaxEventIdKeyBytes <= 511);  // LMDB's default maximum key size
}

TEST_CASE("an empty value is refused at an unaligned address too", "[store][codec]") {
  // The copy into aligned memory passed memcpy a null buffer.
  const std::array<std::byte, 9> bytes{};
  EventDecoder decoder;
  CHECK_THROWS_AS(decoder.decode(std::span(bytes).subspan(1, 0)), StoreError);
  CHECK_THROWS_AS(decoder.decode(std::span(bytes).subspan(0, 0)), StoreError);
}

TEST_CASE("the fast decoder agrees with Cap'n Proto's reader on damaged values", "[store][codec]") {
  NewEvent e;
  e.id = EventId("evt_042");
  e.type = "behavior.failed";
  e.payload = R"({"behavior":"greeter","message":"boom"})";
  e.timestamp = "2026-01-02T03:04:05Z";
  e.actor = "greeter";
  e.caused_by = EventId("evt_041");
  const std::vector<std::byte> good = fast_encoding(e, 42);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int agreed_values = 0;
  int agreed_errors = 0;
  for (int round = 0; round < 20000; ++round) {
    auto bytes = good;
    int flips = 1 + static_cast<int>(next() % 3);
    for (int f = 0; f < flips; ++f) {
      bytes[next() % bytes.size()] ^= static_cast<std::byte>(1u << (next() % 8));
    }
    std::optional<Event> expected;
    try {
      expected = reference_decoding(bytes);
    } catch (const kj::Exception&) {
    }
    EventDecoder fast;
    if (expected) {
      INFO("round " << round);
      REQUIRE(fast.decode(bytes).to_event() == *expected);
      ++agreed_values;
    } else {
      REQUIRE_THROWS_AS(fast.decode(bytes), StoreError);
      ++agreed_errors;
    }
  }
  CHECK(agreed_values > 0);
  CHECK(agreed_errors > 0);
}

}  // namespace
}  // namespace forktrial::store::codec
