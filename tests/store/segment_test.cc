#include <catch2/catch.hpp>
#include <cstring>

#include "store/codec.h"
#include "store/event_store.h"
#include "tests/store/store_test_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

using testing::event;
using testing::events;
using testing::fixed_options;

std::vector<std::byte> to_bytes(std::span<const std::byte> s) {
  return {s.begin(), s.end()};
}

// A run whose history mixes every optional field, forked after its 4th event.
RunInfo make_fork(EventStore& store, const std::string& prefix) {
  RunInfo root = *store.create_run({});
  std::vector<NewEvent> batch = events(prefix, 6);
  batch[1].actor = "agent";
  batch[2].frame_id = "frame_1";
  batch[3].caused_by = EventId(prefix + "1");
  batch[3].payload = R"({"nested":{"k":[1,2,3]}})";
  REQUIRE(store.append(root.id, 0, batch));
  return *store.fork(root.id, EventId(prefix + "4"), {});
}

TEST_CASE("a fork's segment is stored as a blob and has a canonical form", "[store][segment]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo fork = make_fork(store, "e");
  auto digest = store.store_fork_segment(fork.id);
  REQUIRE(digest);
  auto snap = store.snapshot();
  auto blob = snap.blob(*digest);
  REQUIRE(blob);
  CHECK(to_bytes(*blob) == snap.segment(fork, 4));
  CHECK(Sha256::of(std::string_view(reinterpret_cast<const char*>(blob->data()), blob->size())) ==
        *digest);
  CHECK(std::memcmp(blob->data(), kSegmentMagic.data(), 8) == 0);

  // The same events in another store (other run ids, other run numbers)
  // give the same bytes.
  forktrial::testing::TempDir other_dir;
  StoreOptions other_options;
  EventStore other(other_dir.path() / "s", other_options);
  REQUIRE(other.create_run({}));  // shifts the internal run numbers
  RunInfo other_fork = make_fork(other, "e");
  CHECK(other.store_fork_segment(other_fork.id) == digest);
}

TEST_CASE("only a fork has a fork segment", "[store][segment]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo fork = make_fork(store, "e");
  auto root = store.store_fork_segment(fork.fork_of->parent);
  REQUIRE_FALSE(root);
  CHECK(root.error().kind == Refused::invalid_input);
  CHECK_THAT(root.error().message, Catch::Contains("is not a fork"));
  CHECK(store.store_fork_segment(RunId("run_none")).error().kind == Refused::unknown_run);
}

TEST_CASE("loading a segment into a fresh store reproduces the history byte for byte",
          "[store][segment]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo fork = make_fork(store, "e");
  auto snap = store.snapshot();
  std::vector<std::byte> segment = snap.segment(fork, fork.fork_of->seq);

  forktrial::testing::TempDir scratch_dir;
  EventStore scratch(scratch_dir.path() / "s", fixed_options());
  auto loaded = scratch.load_segment(segment, {.id = fork.id, .label = "scratch"});
  REQUIRE(loaded);
  CHECK(loaded->id == fork.id);
  CHECK(loaded->head == 4);
  auto scratch_snap = scratch.snapshot();
  CHECK(scratch_snap.history(*loaded) == snap.history(fork));
  CHECK(scratch_snap.segment(*loaded, 4) == segment);
  // The scratch run continues where the fork's prefix ends.
  CHECK(scratch.append(fork.id, 4, event("child_1")) == 5u);
}

TEST_CASE("damaged segments are refused and create no run", "[store][segment]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo fork = make_fork(store, "e");
  std::vector<std::byte> good = store.snapshot().segment(fork, 4);

  forktrial::testing::TempDir scratch_dir;
  EventStore scratch(scratch_dir.path() / "s", fixed_options());
  auto expect_refused = [&](std::vector<std::byte> bytes, const std::string& why) {
    auto r = scratch.load_segment(bytes, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == Refused::invalid_segment);
    CHECK_THAT(r.error().message, Catch::Contains(why));
  };
  SECTION("bad magic") {
    auto bad = good;
    bad[0] = std::byte{'X'};
    expect_refused(bad, "magic");
  }
  SECTION("truncated") {
    auto bad = good;
    bad.resize(bad.size() - 8);
    expect_refused(bad, "event 4");
  }
  SECTION("trailing bytes") {
    auto bad = good;
    bad.resize(bad.size() + 8);
    expect_refused(bad, "bytes follow the last event");
  }
  SECTION("count larger than the events") {
    auto bad = good;
    bad[15] = std::byte{5};
    expect_refused(bad, "ends before event 5");
  }
  CHECK(scratch.snapshot().runs().empty());
}

// A segment written by hand: the magic, `count`, then each value with its
// length.
std::vector<std::byte> segment_of(std::uint64_t count,
                                  const std::vector<std::vector<std::byte>>& values) {
  std::vector<std::byte> bytes(16);
  std::memcpy(bytes.data(), kSegmentMagic.data(), 8);
  codec::put_u64(bytes.data() + 8, count);
  for (const auto& value : values) {
    const auto length = codec::u64_key(value.size());
    bytes.insert(bytes.end(), length.begin(), length.end());
    bytes.insert(bytes.end(), value.begin(), value.end());
  }
  return bytes;
}

// The stored value of `e` at `seq`, as the store's encoder writes it (which
// checks nothing).
std::vector<std::byte> value_of(const NewEvent& e, std::uint64_t seq) {
  std::vector<std::byte> value(codec::encoded_event_size(e, seq));
  codec::encode_event(e, seq, value);
  return value;
}

TEST_CASE("each kind of bad event in a segment is refused naming it", "[store][segment]") {
  forktrial::testing::TempDir dir;
  EventStore scratch(dir.path() / "s", fixed_options());
  auto expect_refused = [&](const std::vector<std::byte>& bytes, const std::string& why) {
    auto r = scratch.load_segment(bytes, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == Refused::invalid_segment);
    CHECK(r.error().message == "invalid segment: " + why);
  };
  const auto first = value_of(event("e1"), 1);
  SECTION("a length that is not a multiple of 8") {
    auto bytes = segment_of(1, {first});
    bytes[23] = std::byte(std::to_integer<int>(bytes[23]) - 1);
    expect_refused(bytes, "event 1 has an impossible length " + std::to_string(first.size() - 1));
  }
  SECTION("a length of zero") {
    expect_refused(segment_of(1, {{}}), "event 1 has an impossible length 0");
  }
  SECTION("a length past the end") {
    auto bytes = segment_of(1, {first});
    bytes.resize(bytes.size() - 8);
    expect_refused(bytes, "event 1 has an impossible length " + std::to_string(first.size()));
  }
  SECTION("a value that is not in canonical form") {
    auto padded = first;
    padded.resize(padded.size() + 8);  // a zero word the canonical form drops
    expect_refused(segment_of(1, {padded}), "event 1 is not in canonical form");
  }
  SECTION("an event at the wrong seq") {
    expect_refused(segment_of(2, {first, value_of(event("e2"), 3)}), "event 2 says it is at seq 3");
  }
  SECTION("an event breaking the text rule") {
    expect_refused(segment_of(1, {value_of(event("e1", "bad\x1btype"), 1)}),
                   "event e1: field \"type\" \"bad\\x1btype\" contains the control character "
                   "U+001B at offset 3");
  }
  SECTION("an event id repeated") {
    auto r = scratch.load_segment(segment_of(2, {first, value_of(event("e1"), 2)}), {});
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == Refused::invalid_segment);
    CHECK_THAT(r.error().message, Catch::StartsWith("invalid segment: event id e1 is already") &&
                                      Catch::Contains("(at seq 1)"));
  }
  CHECK(scratch.snapshot().runs().empty());
}

}  // namespace
}  // namespace forktrial::store
