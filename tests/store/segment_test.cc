#include <catch2/catch.hpp>
#include <cstring>

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

}  // namespace
}  // namespace forktrial::store
