// Deflated events (docs/store-format.md, "Deflated events"): a store of
// schema version 2 asked to deflate reads every event back byte for byte,
// keeps fewer bytes, and gives the same segments; a version-1 store, as
// builds before wrote it, is read and written as version 1.
#include <lmdb.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "store/event_store.h"
#include "store_test_support.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace forktrial::store;
using namespace forktrial::store::testing;
namespace fs = std::filesystem;

// Runaway's events, as a trial appends them: alike, hundreds of them.
std::vector<NewEvent> trial_events(int pings) {
  std::vector<NewEvent> out;
  int n = 0;
  const auto next_id = [&n] {
    char id[16];
    std::snprintf(id, sizeof id, "evt_%03d", ++n);
    return EventId(id);
  };
  for (int i = 1; i <= pings; ++i) {
    NewEvent started;
    started.id = next_id();
    started.type = "behavior.started";
    started.payload =
        R"({"behavior":"runaway.pinger","event_id":"evt_001","triggering_event_type":"ping","triggering_object_id":null})";
    started.timestamp = "2026-01-05T09:00:07Z";
    started.actor = "runtime";
    started.caused_by = EventId("evt_001");
    out.push_back(started);
    NewEvent ping;
    ping.id = next_id();
    ping.type = "ping";
    ping.payload = "{\"n\":" + std::to_string(i) + "}";
    ping.timestamp = "2026-01-05T09:00:07Z";
    ping.actor = "runaway.pinger";
    out.push_back(ping);
  }
  // The fields a reader must tell apart: an empty actor is not an absent
  // one, and a payload's bytes are kept as written.
  NewEvent odd;
  odd.id = next_id();
  odd.type = "note";
  odd.payload = "{\"text\": \"caf\xc3\xa9 \\u00e9\",  \"big\": 123456789012345678901234567890}";
  odd.timestamp = "2026-01-05T09:00:08.123456Z";
  odd.actor = "";
  odd.frame_id = "frame#1";
  out.push_back(odd);
  return out;
}

// A raw LMDB handle on a store's directory, the store closed: for what the
// store does not show (its values' form, its meta table) and what only a
// corrupt or older store holds.
class RawStore {
 public:
  RawStore(const fs::path& path, bool write) {
    REQUIRE(mdb_env_create(&env_) == 0);
    mdb_env_set_maxdbs(env_, 16);
    REQUIRE(mdb_env_open(env_, path.c_str(), write ? 0 : MDB_RDONLY, 0644) == 0);
    REQUIRE(mdb_txn_begin(env_, nullptr, write ? 0 : MDB_RDONLY, &txn_) == 0);
  }
  ~RawStore() {
    if (txn_ != nullptr) mdb_txn_abort(txn_);
    mdb_env_close(env_);
  }
  RawStore(const RawStore&) = delete;
  RawStore& operator=(const RawStore&) = delete;

  MDB_txn* txn() const { return txn_; }
  MDB_dbi dbi(const char* name) const {
    MDB_dbi dbi = 0;
    REQUIRE(mdb_dbi_open(txn_, name, 0, &dbi) == 0);
    return dbi;
  }
  void commit() {
    REQUIRE(mdb_txn_commit(txn_) == 0);
    txn_ = nullptr;
  }

 private:
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
};

MDB_val schema_version_key() {
  return MDB_val{14, const_cast<char*>("schema_version")};
}

// Each stored value of the events table, in key order.
std::vector<std::vector<std::byte>> stored_values(const fs::path& store) {
  std::vector<std::vector<std::byte>> values;
  RawStore raw(store, false);
  MDB_cursor* cursor = nullptr;
  REQUIRE(mdb_cursor_open(raw.txn(), raw.dbi("events"), &cursor) == 0);
  MDB_val key;
  MDB_val value;
  while (mdb_cursor_get(cursor, &key, &value, MDB_NEXT) == 0) {
    const auto* bytes = static_cast<const std::byte*>(value.mv_data);
    values.emplace_back(bytes, bytes + value.mv_size);
  }
  mdb_cursor_close(cursor);
  return values;
}

// Rewrites the store's schema version, as an older or newer build wrote it.
void set_schema_version(const fs::path& store, unsigned char version) {
  RawStore raw(store, true);
  unsigned char v[4] = {0, 0, 0, version};
  MDB_val key = schema_version_key();
  MDB_val value{4, v};
  REQUIRE(mdb_put(raw.txn(), raw.dbi("meta"), &key, &value, 0) == 0);
  raw.commit();
}

std::uint64_t value_bytes(const std::vector<std::vector<std::byte>>& values) {
  std::uint64_t total = 0;
  for (const auto& value : values) total += value.size();
  return total;
}

bool any_deflated(const std::vector<std::vector<std::byte>>& values) {
  for (const auto& value : values) {
    if (!value.empty() && value[0] == std::byte{0xff}) return true;
  }
  return false;
}

// A store holding run_root (the events) and its fork run_fork at the 5th
// event, with the rest of the events appended to the fork.
void fill(EventStore& store, const std::vector<NewEvent>& events) {
  REQUIRE(store.create_run(NewRun{.id = RunId("run_root"), .label = "root"}));
  REQUIRE(store.append(RunId("run_root"), 0, std::span(events).first(5)));
  REQUIRE(store.fork(RunId("run_root"), EventId("evt_005"), NewRun{.id = RunId("run_fork")}));
  REQUIRE(store.append(RunId("run_fork"), 5, std::span(events).subspan(5)));
}

}  // namespace

TEST_CASE("deflated events read back byte for byte, in fewer bytes, with the same segments",
          "[store][deflate]") {
  forktrial::testing::TempDir dir;
  const auto events = trial_events(100);
  StoreOptions deflating = fixed_options();
  deflating.deflate_events = true;
  std::vector<Event> plain_history;
  std::vector<std::byte> plain_segment;
  {
    EventStore plain(dir.path() / "plain", fixed_options());
    fill(plain, events);
    auto snapshot = plain.snapshot();
    plain_history = snapshot.history(*snapshot.run(RunId("run_fork")));
    plain_segment = snapshot.segment(*snapshot.run(RunId("run_fork")), events.size());
  }
  {
    EventStore store(dir.path() / "deflated", deflating);
    fill(store, events);
    auto snapshot = store.snapshot();
    const auto fork = *snapshot.run(RunId("run_fork"));
    CHECK(fork.head == events.size());
    const auto history = snapshot.history(fork);
    CHECK(history == plain_history);
    REQUIRE(history.size() == events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      CHECK(static_cast<const NewEvent&>(history[i]) == events[i]);
    }
    CHECK(history.back().actor == std::optional<std::string>(""));
    CHECK(!history.back().caused_by);
    // Looked up by id, by type, and from the middle.
    CHECK(snapshot.find_event(fork, EventId("evt_150"))->payload == events[149].payload);
    CHECK(snapshot.events_of_type(fork, "ping").size() == 100);
    CHECK(snapshot.history(fork, 200).front() == plain_history[199]);
    // A segment holds canonical encodings, whichever form the store keeps.
    CHECK(snapshot.segment(fork, events.size()) == plain_segment);
    const auto digest = store.store_fork_segment(RunId("run_fork"));
    REQUIRE(digest);
  }
  const auto plain = stored_values(dir.path() / "plain");
  const auto deflated = stored_values(dir.path() / "deflated");
  REQUIRE(plain.size() == deflated.size());
  CHECK(!any_deflated(plain));
  CHECK(any_deflated(deflated));
  CHECK(value_bytes(deflated) * 2 < value_bytes(plain));
  // Loaded into a new store, the segment gives the same history again.
  {
    EventStore loaded(dir.path() / "loaded", deflating);
    REQUIRE(loaded.load_segment(plain_segment, NewRun{.id = RunId("run_loaded")}));
    auto snapshot = loaded.snapshot();
    CHECK(snapshot.history(*snapshot.run(RunId("run_loaded"))) == plain_history);
  }
}

TEST_CASE("an append that asks for its events plain keeps them plain in a deflating store",
          "[store][deflate]") {
  forktrial::testing::TempDir dir;
  const auto events = trial_events(20);
  StoreOptions deflating = fixed_options();
  deflating.deflate_events = true;
  {
    EventStore store(dir.path() / "store", deflating);
    REQUIRE(store.create_run(NewRun{.id = RunId("run_root"), .label = "root"}));
    const auto head = store.write([&](Writer& writer) {
      return writer.append(RunId("run_root"), 0, events, /*deflate=*/false);
    });
    REQUIRE(head);
    auto snapshot = store.snapshot();
    const auto history = snapshot.history(*snapshot.run(RunId("run_root")));
    REQUIRE(history.size() == events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      CHECK(static_cast<const NewEvent&>(history[i]) == events[i]);
    }
  }
  CHECK(!any_deflated(stored_values(dir.path() / "store")));
}

TEST_CASE("a store of schema version 1 is read and written as version 1, never deflated",
          "[store][deflate]") {
  forktrial::testing::TempDir dir;
  const auto events = trial_events(20);
  const fs::path path = dir.path() / "old";
  // A store as builds before deflated events wrote it: version 1, its
  // events canonical.
  {
    EventStore store(path, fixed_options());
    REQUIRE(store.create_run(NewRun{.id = RunId("run_root"), .label = "root"}));
    REQUIRE(store.append(RunId("run_root"), 0, std::span(events).first(5)));
  }
  set_schema_version(path, 1);
  StoreOptions deflating = fixed_options();
  deflating.deflate_events = true;
  {
    EventStore store(path, deflating);
    REQUIRE(store.fork(RunId("run_root"), EventId("evt_005"), NewRun{.id = RunId("run_fork")}));
    REQUIRE(store.append(RunId("run_fork"), 5, std::span(events).subspan(5)));
    auto snapshot = store.snapshot();
    const auto history = snapshot.history(*snapshot.run(RunId("run_fork")));
    REQUIRE(history.size() == events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      CHECK(static_cast<const NewEvent&>(history[i]) == events[i]);
    }
  }
  CHECK(!any_deflated(stored_values(path)));
  // Still version 1: a build before deflated events opens it.
  RawStore raw(path, false);
  MDB_val key = schema_version_key();
  MDB_val value;
  REQUIRE(mdb_get(raw.txn(), raw.dbi("meta"), &key, &value) == 0);
  REQUIRE(value.mv_size == 4);
  CHECK(static_cast<const unsigned char*>(value.mv_data)[3] == 1);
}

TEST_CASE("a new store is of schema version 2, and a store of version 0 is refused",
          "[store][deflate]") {
  forktrial::testing::TempDir dir;
  { EventStore store(dir.path() / "s"); }
  set_schema_version(dir.path() / "s", 0);
  CHECK_THROWS_AS(EventStore(dir.path() / "s"), SchemaVersionMismatch);
  set_schema_version(dir.path() / "s", 2);
  CHECK_NOTHROW(EventStore(dir.path() / "s"));
}

TEST_CASE("a deflated event that does not inflate to its stated size is corrupt",
          "[store][deflate]") {
  forktrial::testing::TempDir dir;
  const fs::path path = dir.path() / "s";
  StoreOptions deflating = fixed_options();
  deflating.deflate_events = true;
  {
    EventStore store(path, deflating);
    REQUIRE(store.create_run(NewRun{.id = RunId("run_root"), .label = "root"}));
    REQUIRE(store.append(RunId("run_root"), 0, trial_events(1)));
  }
  // Its stated size, one byte more.
  {
    RawStore raw(path, true);
    MDB_cursor* cursor = nullptr;
    REQUIRE(mdb_cursor_open(raw.txn(), raw.dbi("events"), &cursor) == 0);
    MDB_val key;
    MDB_val value;
    REQUIRE(mdb_cursor_get(cursor, &key, &value, MDB_FIRST) == 0);
    std::vector<unsigned char> bytes(static_cast<unsigned char*>(value.mv_data),
                                     static_cast<unsigned char*>(value.mv_data) + value.mv_size);
    REQUIRE(bytes[0] == 0xff);
    bytes[4] += 1;
    MDB_val changed{bytes.size(), bytes.data()};
    REQUIRE(mdb_cursor_put(cursor, &key, &changed, MDB_CURRENT) == 0);
    mdb_cursor_close(cursor);
    raw.commit();
  }
  EventStore store(path, deflating);
  auto snapshot = store.snapshot();
  CHECK_THROWS_WITH(snapshot.history(*snapshot.run(RunId("run_root"))),
                    Catch::Contains("does not inflate"));
}
