// The store's threading contract around its map: which thread may end a
// Snapshot, and what a write or a new Snapshot does when the map must change
// size (grow for this process's write, or follow another process's growth)
// while Snapshots are open.
#include <catch2/catch.hpp>
#include <filesystem>
#include <latch>
#include <optional>
#include <stdexcept>
#include <thread>

#include "store/event_store.h"
#include "tests/store/store_test_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

using testing::event;
using testing::ids_of;
using Strings = std::vector<std::string>;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A store whose map starts at 1 MiB, so a blob of a few MiB must grow it.
StoreOptions small_map() {
  StoreOptions options = testing::fixed_options();
  options.initial_map_size = kMiB;
  options.max_map_size = 256 * kMiB;
  return options;
}

std::vector<std::byte> filled(std::size_t size, std::byte value) {
  return std::vector<std::byte>(size, value);
}

Digest digest_of(const std::vector<std::byte>& bytes) {
  Sha256 hasher;
  hasher.update(bytes.data(), bytes.size());
  return hasher.finish();
}

// A store with a 1 MiB map holding one run of `events` events e1, e2, ...
struct SmallStore {
  explicit SmallStore(int events, StoreOptions options = small_map())
      : store(dir.path() / "s", std::move(options)), run(store.create_run({})->id) {
    REQUIRE(store.append(run, 0, testing::events("e", events)) == std::uint64_t(events));
  }

  // Stores `bytes`, too many for the 1 MiB map: the map must have grown.
  void put_growing(const std::vector<std::byte>& bytes) {
    const Digest d = store.put_blob(bytes);
    CHECK(store.map_size() >= 4 * kMiB);
    CHECK(store.snapshot().blob(d)->size() == bytes.size());
  }

  forktrial::testing::TempDir dir;
  EventStore store;
  RunId run;
};

TEST_CASE("a snapshot opened on one thread may end on another", "[store][threads]") {
  SmallStore f(3);
  auto& [dir, store, run] = f;

  std::optional<Snapshot> snap = store.snapshot();
  std::uint64_t seen = 0;
  std::thread other([&] {
    seen = snap->count(*snap->run(run));
    snap.reset();
  });
  other.join();
  CHECK(seen == 3);
  // No snapshot is open any more: this thread's write may grow the map.
  f.put_growing(filled(3 * kMiB, std::byte{1}));
}

TEST_CASE("a write that must grow the map fails at once while its thread holds a snapshot",
          "[store][map]") {
  SmallStore f(2);
  auto& [dir, store, run] = f;
  const auto big = filled(3 * kMiB, std::byte{2});
  {
    Snapshot held = store.snapshot();
    const RunInfo seen = *held.run(run);
    CHECK_THROWS_AS(store.put_blob(big), ResizeBlocked);
    CHECK_THROWS_WITH(store.put_blob(big),
                      Catch::Contains((dir.path() / "s").string()) &&
                          Catch::Contains("this thread holds 1 open snapshot") &&
                          Catch::Contains("nothing of this write was kept"));
    CHECK(store.map_size() == kMiB);
    // A write that fits goes through, and the snapshot keeps its view.
    CHECK(store.append(run, 2, event("e3")) == 3u);
    CHECK(held.count(seen) == 2);
    CHECK_FALSE(held.has_blob(digest_of(big)));
  }
  CHECK_FALSE(store.snapshot().has_blob(digest_of(big)));
  f.put_growing(big);
}

TEST_CASE("a write that must grow the map waits for snapshots other threads hold", "[store][map]") {
  SmallStore f(2);
  auto& [dir, store, run] = f;

  std::latch opened(1);
  std::latch writing(1);
  std::uint64_t seen = 0;
  std::thread other([&] {
    Snapshot snap = store.snapshot();
    seen = snap.count(*snap.run(run));
    opened.count_down();
    writing.wait();
  });
  opened.wait();
  writing.count_down();
  CHECK_NOTHROW(f.put_growing(filled(3 * kMiB, std::byte{3})));
  other.join();
  CHECK(seen == 2);
}

TEST_CASE("a snapshot is held by the thread that used it last", "[store][map]") {
  StoreOptions options = small_map();
  options.grow_wait = std::chrono::milliseconds(0);  // report the open snapshot, do not wait
  SmallStore f(2, options);
  auto& [dir, store, run] = f;

  // Opened here, then used by the other thread, which holds it from then on:
  // this thread's write is blocked by another thread's snapshot, not its own.
  std::optional<Snapshot> snap = store.snapshot();
  std::latch used(1);
  std::latch checked(1);
  std::uint64_t seen = 0;
  std::thread other([&] {
    seen = snap->count(*snap->run(run));
    used.count_down();
    checked.wait();
    snap.reset();
  });
  used.wait();
  const auto big = filled(3 * kMiB, std::byte{5});
  std::string blocked;
  try {
    store.put_blob(big);
  } catch (const StoreError& e) {
    blocked = e.what();
    CHECK(dynamic_cast<const ResizeBlocked*>(&e) != nullptr);
  }
  checked.count_down();
  other.join();
  CHECK(seen == 2);
  CHECK_THAT(blocked, Catch::Contains("1 snapshot or write of this process stayed open for 0 ms") &&
                          !Catch::Contains("this thread holds"));
  f.put_growing(big);
}

// Runs the helper process on `store_dir`: it appends `event_id` to `run` and
// stores a blob of `mib` MiB of 0x5a, growing the map. Returns that digest.
Digest grow_in_other_process(const std::filesystem::path& store_dir, const std::string& run,
                             const std::string& event_id, int mib) {
  auto result = forktrial::testing::run_command(
      {FORKTRIAL_STORE_GROW_HELPER, store_dir.string(), run, event_id, std::to_string(mib)});
  INFO("helper stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  const Digest expected = digest_of(filled(std::size_t(mib) * kMiB, std::byte{0x5a}));
  REQUIRE(result.out == expected.str() + "\n");
  return expected;
}

TEST_CASE("a map another process grew is adopted for reads and writes", "[store][map]") {
  SmallStore f(2);
  auto& [dir, store, run] = f;
  const auto path = dir.path() / "s";

  std::optional<Snapshot> before = store.snapshot();
  const Digest first = grow_in_other_process(path, run.str(), "other_1", 3);
  // The open snapshot keeps reading its own view of the store.
  CHECK(ids_of(before->history(*before->run(run))) == Strings{"e1", "e2"});
  // The data now reaches past this process's map. Following it means a new
  // map, which waits for every snapshot of this process to end: the thread
  // holding one is refused at once.
  CHECK_THROWS_AS(store.snapshot(), ResizeBlocked);
  CHECK_THROWS_WITH(store.snapshot(), Catch::Contains("another process") &&
                                          Catch::Contains("this thread holds 1 open snapshot"));
  before.reset();
  {
    auto snap = store.snapshot();
    CHECK(ids_of(snap.history(*snap.run(run))) == Strings{"e1", "e2", "other_1"});
    CHECK(snap.blob(first)->size() == 3 * kMiB);
  }
  CHECK(store.map_size() >= 4 * kMiB);

  // This time a write meets the other process's growth first, and adopts it.
  const std::size_t map_before = store.map_size();
  const Digest second = grow_in_other_process(path, run.str(), "other_2", 6);
  CHECK(store.append(run, 4, event("e3")) == 5u);
  CHECK(store.map_size() > map_before);
  // And this process grows the map further for a write of its own.
  const auto mine = filled(12 * kMiB, std::byte{4});
  const Digest own = store.put_blob(mine);
  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(run))) == Strings{"e1", "e2", "other_1", "other_2", "e3"});
  CHECK(snap.blob(first)->size() == 3 * kMiB);
  CHECK(snap.blob(second)->size() == 6 * kMiB);
  CHECK(snap.blob(own)->size() == mine.size());
  CHECK(store.map_size() >= 16 * kMiB);
}

StoreOptions exclusive_small_map() {
  StoreOptions options = small_map();
  options.exclusive = true;
  return options;
}

TEST_CASE("an exclusive store keeps no lock file and reads what another process wrote meanwhile",
          "[store][map]") {
  SmallStore f(2, exclusive_small_map());
  auto& [dir, store, run] = f;
  const auto path = dir.path() / "s";
  CHECK_FALSE(std::filesystem::exists(path / "lock.mdb"));

  // Another process writes while this one has no transaction open (its map
  // grows past this process's), as a trial child writes its scratch store.
  const Digest theirs = grow_in_other_process(path, run.str(), "other_1", 3);
  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(run))) == Strings{"e1", "e2", "other_1"});
  CHECK(snap.blob(theirs)->size() == 3 * kMiB);
  CHECK(store.map_size() >= 4 * kMiB);
}

TEST_CASE("a write to an exclusive store while another transaction is open is refused as a bug",
          "[store]") {
  SmallStore f(1, exclusive_small_map());
  auto& [dir, store, run] = f;
  {
    auto snap = store.snapshot();
    CHECK_THROWS_AS(store.append(run, 1, event("e2")), std::logic_error);
    CHECK_THROWS_WITH(store.append(run, 1, event("e2")),
                      Catch::Contains("1 other transactions of this process were open"));
  }
  // With the snapshot gone it writes, and nothing of the refused writes was kept.
  CHECK(store.append(run, 1, event("e2")) == 2u);
  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(run))) == Strings{"e1", "e2"});
}

}  // namespace
}  // namespace forktrial::store
