#include "store/event_store.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <thread>

#include "tests/store/store_test_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

using testing::event;
using testing::events;
using testing::fixed_options;
using testing::ids_of;
using Strings = std::vector<std::string>;

RunInfo must(Result<RunInfo> r) {
  if (!r) FAIL(r.error().message);
  return *r;
}

TEST_CASE("a new run starts empty and reads back what was appended", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({.label = "first"}));
  CHECK(run.id.str() == "run_001");
  CHECK(run.head == 0);
  CHECK(run.created_at == "2026-01-01T00:00:00.000000Z");

  NewEvent e = event("evt_001", "goal.created", R"({"goal":"hi"})");
  e.actor = "user";
  e.caused_by = EventId("evt_000");
  REQUIRE(store.append(run.id, 0, e) == 1u);
  REQUIRE(store.append(run.id, 1, events("b", 3)) == 4u);

  auto snap = store.snapshot();
  RunInfo now = *snap.run(run.id);
  CHECK(now.head == 4);
  CHECK(snap.count(now) == 4);
  auto history = snap.history(now);
  REQUIRE(history.size() == 4);
  CHECK(history[0].id.str() == "evt_001");
  CHECK(history[0].type == "goal.created");
  CHECK(history[0].payload == R"({"goal":"hi"})");
  CHECK(history[0].actor == std::optional<std::string>("user"));
  CHECK_FALSE(history[0].frame_id.has_value());
  CHECK(history[0].caused_by == std::optional<EventId>(EventId("evt_000")));
  CHECK(history[0].seq == 1);
  CHECK(ids_of(snap.history(now, 3)) == Strings{"b2", "b3"});
  CHECK(snap.find_event(now, EventId("b1"))->seq == 2);
  CHECK_FALSE(snap.find_event(now, EventId("nope")).has_value());
}

TEST_CASE("an event far larger than Cap'n Proto's default traversal limit reads back",
          "[store][release-only]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({.label = "big"}));
  // 96 MiB of payload: past the 64 MiB a reader visits by default (a job
  // of a million trials is one such record in the orchestration log).
  const std::string payload = R"({"x":")" + std::string(std::size_t{96} << 20, 'a') + R"("})";
  REQUIRE(store.append(run.id, 0, event("evt_big", "job.submitted", payload)) == 1u);
  auto snap = store.snapshot();
  auto history = snap.history(*snap.run(run.id));
  REQUIRE(history.size() == 1);
  CHECK(history[0].payload.size() == payload.size());
  CHECK(history[0].payload == payload);
  // Read back checked, as a segment is (a fork's history, a replayed log).
  auto digest = store.write([&](Writer& w) { return w.store_segment(run.id, 1); });
  REQUIRE(digest);
  auto blob = store.snapshot().blob(*digest);
  REQUIRE(blob);
  EventStore other(dir.path() / "other", fixed_options());
  auto loaded = other.load_segment(std::span(blob->data(), blob->size()), {.label = "copy"});
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded);
  auto copied = other.snapshot();
  CHECK(copied.history(*copied.run(loaded->id))[0].payload == payload);
}

TEST_CASE("a payload past what one stored event can count is refused, not cut",
          "[store][release-only]") {
  const std::string payload =
      R"({"x":")" + std::string(kMaxPayloadBytes, 'a') + R"("})";  // past it by 8
  const auto problem = event_problem(event("evt_huge", "job.submitted", payload));
  REQUIRE(problem);
  CHECK(*problem == "event evt_huge payload is " + std::to_string(payload.size()) +
                        " bytes; an event holds at most 536870910");
}

TEST_CASE("an empty actor is kept apart from an absent one", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  NewEvent e = event("e1");
  e.actor = "";
  e.frame_id = "";
  REQUIRE(store.append(run.id, 0, e));
  auto history = store.snapshot().history(*store.snapshot().run(run.id));
  CHECK(history.at(0).actor == std::optional<std::string>(""));
  CHECK(history.at(0).frame_id == std::optional<std::string>(""));
  CHECK_FALSE(history.at(0).caused_by.has_value());
}

TEST_CASE("a commit that the world refuses keeps nothing, and the store writes on after",
          "[store]") {
  forktrial::testing::TempDir dir;
  StoreOptions options = fixed_options();
  bool full = false;
  options.before_commit = [&full] {
    if (full) throw StoreFull("the disk is full");
  };
  EventStore store(dir.path() / "s", options);
  RunInfo run = must(store.create_run({}));
  REQUIRE(store.append(run.id, 0, events("a", 2)) == 2u);
  full = true;
  CHECK_THROWS_AS(store.append(run.id, 2, events("x", 3)), StoreFull);
  CHECK_THROWS_AS(store.create_run({}), StoreFull);
  full = false;
  REQUIRE(store.append(run.id, 2, events("b", 1)) == 3u);
  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(run.id))) == Strings{"a1", "a2", "b1"});
  CHECK_FALSE(snap.run(RunId("run_002")).has_value());  // the refused run was not made
}

TEST_CASE("an append that expects a stale head is refused and writes nothing", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  REQUIRE(store.append(run.id, 0, events("a", 2)) == 2u);

  auto refused = store.append(run.id, 1, events("x", 3));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == Refused::head_moved);
  CHECK_THAT(refused.error().message, Catch::Contains("run_001") &&
                                          Catch::Contains("expected head 1") &&
                                          Catch::Contains("the head is 2"));
  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(run.id))) == Strings{"a1", "a2"});
}

TEST_CASE("two writers racing on one head: exactly one wins", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  Result<std::uint64_t> first, second;
  std::thread a([&] { first = store.append(run.id, 0, events("a", 5)); });
  std::thread b([&] { second = store.append(run.id, 0, events("b", 5)); });
  a.join();
  b.join();
  CHECK(first.has_value() != second.has_value());
  auto snap = store.snapshot();
  CHECK(snap.run(run.id)->head == 5);
}

TEST_CASE("a duplicate event id is refused with the id named", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  REQUIRE(store.append(run.id, 0, events("e", 3)));

  auto expect_duplicate = [&](const RunId& target, std::uint64_t head, std::vector<NewEvent> batch,
                              const std::string& named) {
    auto refused = store.append(target, head, batch);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().kind == Refused::duplicate_event_id);
    CHECK_THAT(refused.error().message, Catch::Contains(named));
  };
  SECTION("against a stored event") {
    expect_duplicate(run.id, 3, {event("e4"), event("e2")}, "event id e2 is already");
  }
  SECTION("inside one batch") {
    expect_duplicate(run.id, 3, {event("x"), event("x")}, "event id x is already");
  }
  SECTION("against an inherited event of a fork") {
    RunInfo fork = must(store.fork(run.id, EventId("e2"), {}));
    expect_duplicate(fork.id, 2, {event("e1")}, "(at seq 1)");
    // e3 is the parent's, after the fork point: not in the fork's history.
    CHECK(store.append(fork.id, 2, event("e3")) == 3u);
  }
  auto snap = store.snapshot();
  CHECK(snap.run(run.id)->head == 3);
}

TEST_CASE("a generated run id that is taken is drawn again", "[store]") {
  forktrial::testing::TempDir dir;
  StoreOptions options = fixed_options();
  auto draws = std::make_shared<std::vector<std::string>>(
      std::vector<std::string>{"run_b", "run_a", "run_a", "run_b", "run_c"});
  options.new_run_id = [draws] {
    std::string next = draws->front();
    draws->erase(draws->begin());
    return RunId(next);
  };
  EventStore store(dir.path() / "s", options);
  CHECK(must(store.create_run({})).id.str() == "run_b");
  CHECK(must(store.create_run({})).id.str() == "run_a");
  CHECK(must(store.create_run({})).id.str() == "run_c");  // run_a, run_b taken
  CHECK(store.create_run({.id = RunId("run_c")}).error().kind == Refused::run_exists);
}

TEST_CASE("ids in and out of counter order are indexed and checked alike", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo older = must(store.create_run({}));
  RunInfo run = must(store.create_run({}));
  std::string longest;
  for (std::size_t i = 0; i < kMaxIdBytes; ++i) longest += (i % 2 == 0) ? '1' : 'a';
  // Counter ids (appended to the index), then ids that sort before them.
  REQUIRE(store.append(run.id, 0, events("evt_", 1000)) == 1000u);
  REQUIRE(store.append(run.id, 1000,
                       std::vector{event("a"), event("z\xc3\xa9z"), event(longest)}) == 1003u);
  REQUIRE(store.append(older.id, 0, events("evt_", 3)) == 3u);  // same ids, another run
  auto refused = store.append(run.id, 1003, std::vector{event("evt_1001"), event("evt_7")});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message,
             Catch::Contains("event id evt_7") && Catch::Contains("seq 7"));
  CHECK(store.append(run.id, 1003, event("z\xc3\xa9z")).error().kind ==
        Refused::duplicate_event_id);
  CHECK(store.append(run.id, 1003, event(longest + "1")).error().kind == Refused::invalid_event);

  auto snap = store.snapshot();
  RunInfo now = *snap.run(run.id);
  CHECK(snap.find_event(now, EventId("evt_999"))->seq == 999);
  CHECK(snap.find_event(now, EventId("evt_1000"))->seq == 1000);
  CHECK(snap.find_event(now, EventId(longest))->seq == 1003);
  CHECK(snap.find_event(now, EventId("z\xc3\xa9z"))->seq == 1002);
  CHECK_FALSE(snap.find_event(now, EventId("z")).has_value());
  CHECK(snap.find_event(*snap.run(older.id), EventId("evt_3"))->seq == 3);
  CHECK_FALSE(snap.find_event(*snap.run(older.id), EventId("evt_4")).has_value());
}

TEST_CASE("invalid events and unknown runs are refused", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  auto no_type = event("e1", "");
  CHECK(store.append(run.id, 0, no_type).error().kind == Refused::invalid_event);
  CHECK(store.append(run.id, 0, event("")).error().kind == Refused::invalid_event);
  CHECK(store.append(RunId("run_missing"), 0, event("e1")).error().kind == Refused::unknown_run);
  CHECK(store.create_run({.id = run.id}).error().kind == Refused::run_exists);
}

const Strings kTextFields{"id", "type", "actor", "frame_id", "caused_by", "timestamp"};

// A valid event "e1" whose text field `field` holds `value`.
NewEvent with_field(const std::string& field, const std::string& value) {
  NewEvent e = event("e1");
  if (field == "id") e.id = EventId(value);
  if (field == "type") e.type = value;
  if (field == "actor") e.actor = value;
  if (field == "frame_id") e.frame_id = value;
  if (field == "caused_by") e.caused_by = EventId(value);
  if (field == "timestamp") e.timestamp = value;
  return e;
}

// Every text field holding `value` is refused as invalid_event, the message
// naming the field (and the event, when its id is not the bad field) and `why`.
void check_text_refused(const std::string& value, const std::string& why) {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  for (const std::string& field : kTextFields) {
    INFO("field " << field);
    auto refused = store.append(run.id, 0, std::vector{event("e0"), with_field(field, value)});
    REQUIRE_FALSE(refused);
    CHECK(refused.error().kind == Refused::invalid_event);
    CHECK_THAT(refused.error().message, Catch::Contains("field \"" + field + "\"") &&
                                            Catch::Contains(why) &&
                                            Catch::Contains("nothing was written"));
    if (field != "id") CHECK_THAT(refused.error().message, Catch::Contains("event e1: "));
  }
  CHECK(store.snapshot().history(*store.snapshot().run(run.id)).empty());
}

TEST_CASE("an event text field that is not valid UTF-8 is refused naming the field", "[store]") {
  check_text_refused("ok\xff", "is not valid UTF-8 (byte 0xFF at offset 2)");
  check_text_refused("\xed\xa0\x80", "is not valid UTF-8 (byte 0xED at offset 0)");  // a surrogate
}

TEST_CASE("an event text field with a control character is refused naming the field", "[store]") {
  check_text_refused(std::string("a\0b", 3), "contains the control character U+0000 at offset 1");
  check_text_refused("\x1b[2J", "contains the control character U+001B at offset 0");
  check_text_refused("two\nlines", "contains the control character U+000A at offset 3");
  check_text_refused("del\x7f", "contains the control character U+007F at offset 3");
  check_text_refused(
      "c1 \xc2\x9b"
      "2J",
      "contains the control character U+009B at offset 3");
}

TEST_CASE("an event text field beyond its length bound is refused naming the field", "[store]") {
  check_text_refused(std::string(16 << 20, 't'), "is 16777216 bytes long; the limit is");
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  for (const std::string& field : kTextFields) {
    INFO("field " << field);
    const bool id = field == "id" || field == "caused_by";
    const std::size_t limit = id ? 250 : 1024;
    auto over = store.append(run.id, 0, with_field(field, std::string(limit + 1, 'x')));
    REQUIRE_FALSE(over);
    CHECK_THAT(over.error().message,
               Catch::Contains("field \"" + field + "\"") &&
                   Catch::Contains("is " + std::to_string(limit + 1) +
                                   " bytes long; the limit is " + std::to_string(limit)));
  }
  // At the bound every field is accepted, and text beyond ASCII is fine.
  NewEvent longest = event(std::string(250, 'i'), std::string(1024, 't'));
  longest.actor = std::string(1022, 'a') + "\xc3\xa9";
  longest.frame_id = "fr\xc3\xa9me \xe2\x9c\x93";
  longest.caused_by = EventId(std::string(250, 'c'));
  REQUIRE(store.append(run.id, 0, longest) == 1u);
  CHECK(store.snapshot().history(*store.snapshot().run(run.id)).at(0) == Event{longest, 1});
}

TEST_CASE("run ids, labels and creation times follow the text rules of events", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo parent = must(store.create_run({.id = RunId("run_p")}));
  REQUIRE(store.append(parent.id, 0, event("e1")));
  auto refused = [&](const NewRun& run, const std::string& why) {
    for (bool fork : {false, true}) {
      INFO((fork ? "fork" : "create_run"));
      auto result = fork ? store.fork(parent.id, EventId("e1"), run) : store.create_run(run);
      REQUIRE_FALSE(result);
      CHECK(result.error().kind == Refused::invalid_input);
      CHECK_THAT(result.error().message, Catch::Contains(why));
    }
  };
  refused({.label = "\x1b[2J\x1b[Hrun ok"},
          "label \"\\x1b[2J\\x1b[Hrun ok\" contains the control "
          "character U+001B at offset 0");
  refused({.label = "caf\xe9"}, "label \"caf\\xe9\" is not valid UTF-8 (byte 0xE9 at offset 3)");
  refused({.label = std::string(1025, 'l')}, "is 1025 bytes long; the limit is 1024");
  refused({.id = RunId("run\n1")}, "run id \"run\\n1\" contains the control character U+000A");
  refused({.id = RunId("run_\xff")}, "run id \"run_\\xff\" is not valid UTF-8");
  refused({.created_at = std::string("2026\x07")}, "created_at");
  CHECK(store.snapshot().runs().size() == 1);
  // Empty and non-ASCII labels are fine.
  CHECK(must(store.create_run({.label = ""})).label.empty());
  CHECK(must(store.create_run({.label = "r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93"})).label ==
        "r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93");
}

TEST_CASE("a run goal may span lines but holds no other control character", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  // activegraph's goals are what a user typed, line breaks and tabs included.
  const std::string goal = "Plan the week.\r\nThen:\n\t- report";
  RunInfo run = must(store.create_run({.goal = goal}));
  CHECK(run.goal == goal);
  CHECK(store.snapshot().run(run.id)->goal == goal);
  auto refused = store.create_run({.goal = std::string("Plan\x1b[2J")});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == Refused::invalid_input);
  CHECK_THAT(refused.error().message,
             Catch::Contains("goal \"Plan\\x1b[2J\" contains the control character U+001B"));
  // A label stays one line.
  CHECK_FALSE(store.create_run({.label = "two\nlines"}));
}

TEST_CASE("a run keeps the owner and source it was created with, and one without them has none",
          "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  const Digest source = Sha256::of("the file a client imported");
  const std::string owner = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  RunInfo owned = must(store.create_run({.label = "owned", .owner = owner, .source = source}));
  CHECK(owned.owner == owner);
  CHECK(owned.source == source);
  const RunInfo plain = must(store.create_run({.label = "plain"}));
  // Read back, decoded from the stored records.
  const auto snapshot = store.snapshot();
  CHECK(snapshot.run(owned.id) == owned);
  CHECK(snapshot.run(plain.id)->owner.empty());
  CHECK_FALSE(snapshot.run(plain.id)->source);
  // An owner is text of a run, held to the same rule.
  auto refused = store.create_run({.owner = std::string("key\x1b")});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message,
             Catch::Contains("owner \"key\\x1b\" contains the control character U+001B"));
}

TEST_CASE("a fork of a fork of a fork reads exactly its lineage", "[store][lineage]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo root = must(store.create_run({.label = "root"}));
  REQUIRE(store.append(root.id, 0, events("r", 5)));
  RunInfo f1 = must(store.fork(root.id, EventId("r3"), {.label = "f1"}));
  CHECK(f1.head == 3);
  CHECK(f1.fork_of == ForkPoint{root.id, EventId("r3"), 3});
  REQUIRE(store.append(f1.id, 3, events("a", 3)) == 6u);
  RunInfo f2 = must(store.fork(f1.id, EventId("a2"), {.label = "f2"}));
  REQUIRE(store.append(f2.id, 5, events("b", 2)) == 7u);
  // f3 forks f2 at an event f2 inherited from the root, two levels up.
  RunInfo f3 = must(store.fork(f2.id, EventId("r2"), {.label = "f3"}));
  REQUIRE(store.append(f3.id, 2, events("c", 1)) == 3u);

  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(root.id))) == Strings{"r1", "r2", "r3", "r4", "r5"});
  CHECK(ids_of(snap.history(*snap.run(f1.id))) == Strings{"r1", "r2", "r3", "a1", "a2", "a3"});
  CHECK(ids_of(snap.history(*snap.run(f2.id))) ==
        Strings{"r1", "r2", "r3", "a1", "a2", "b1", "b2"});
  CHECK(ids_of(snap.history(*snap.run(f3.id))) == Strings{"r1", "r2", "c1"});
  auto f2_history = snap.history(*snap.run(f2.id));
  for (std::size_t i = 0; i < f2_history.size(); ++i) CHECK(f2_history[i].seq == i + 1);
  CHECK(ids_of(snap.history(*snap.run(f2.id), 4)) == Strings{"a1", "a2", "b1", "b2"});
  CHECK(snap.find_event(*snap.run(f2.id), EventId("r1"))->seq == 1);
  CHECK_FALSE(snap.find_event(*snap.run(f2.id), EventId("a3")).has_value());
  CHECK_FALSE(snap.find_event(*snap.run(f3.id), EventId("r3")).has_value());
  CHECK(snap.runs().size() == 4);
}

TEST_CASE("parent and fork do not see each other's later appends", "[store][lineage]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo root = must(store.create_run({}));
  REQUIRE(store.append(root.id, 0, events("p", 3)));
  RunInfo fork = must(store.fork(root.id, EventId("p2"), {}));
  REQUIRE(store.append(fork.id, 2, events("f", 2)) == 4u);
  REQUIRE(store.append(root.id, 3, events("q", 2)) == 5u);

  auto snap = store.snapshot();
  CHECK(ids_of(snap.history(*snap.run(root.id))) == Strings{"p1", "p2", "p3", "q1", "q2"});
  CHECK(ids_of(snap.history(*snap.run(fork.id))) == Strings{"p1", "p2", "f1", "f2"});
}

TEST_CASE("forking at an unknown event or run is refused", "[store][lineage]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo root = must(store.create_run({}));
  REQUIRE(store.append(root.id, 0, events("p", 2)));
  auto refused = store.fork(root.id, EventId("p9"), {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == Refused::unknown_event);
  CHECK_THAT(refused.error().message, Catch::Contains("p9") && Catch::Contains(root.id.str()));
  CHECK(store.fork(RunId("run_nope"), EventId("p1"), {}).error().kind == Refused::unknown_run);
  CHECK(store.snapshot().runs().size() == 1);
}

TEST_CASE("a visit may read the same snapshot again", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  std::vector<NewEvent> batch = events("e", 4);
  for (auto& e : batch)
    e.payload = R"({"text":")" + std::string(e.id.str().size() * 5, 'p') + "\"}";
  batch[3].caused_by = EventId("e1");
  REQUIRE(store.append(run.id, 0, batch));
  auto snap = store.snapshot();
  RunInfo now = *snap.run(run.id);
  Strings seen;
  snap.for_each_event(now, 1, [&](const EventView& v) {
    std::string id(v.id);
    if (v.caused_by) {
      auto cause = snap.find_event(now, EventId(std::string(*v.caused_by)));
      id += "<-" + cause->id.str();
    }
    seen.push_back(id + ":" + std::string(v.payload));  // read after the nested lookup
    return true;
  });
  CHECK(seen == Strings{"e1:" + batch[0].payload, "e2:" + batch[1].payload,
                        "e3:" + batch[2].payload, "e4<-e1:" + batch[3].payload});
}

TEST_CASE("the events of a type after a point are listed through the lineage", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo root = must(store.create_run({}));
  REQUIRE(store.append(root.id, 0,
                       std::vector{event("e1", "probe.failed"), event("e2", "note"),
                                   event("e3", "probe.failed"), event("e4", "probe.failed")}));
  RunInfo fork = must(store.fork(root.id, EventId("e3"), {}));
  REQUIRE(store.append(fork.id, 3,
                       std::vector{event("f1", "probe.failed"), event("f2", "note"),
                                   event("f3", "behavior.failed")}));
  auto snap = store.snapshot();
  const RunInfo now = *snap.run(fork.id);
  CHECK(ids_of(snap.events_of_type(now, "probe.failed")) == Strings{"e1", "e3", "f1"});
  CHECK(ids_of(snap.events_of_type(now, "probe.failed", 3)) == Strings{"f1"});
  CHECK(ids_of(snap.events_of_type(now, "note", 1)) == Strings{"e2", "f2"});
  CHECK(ids_of(snap.events_of_type(now, "behavior.failed")) == Strings{"f3"});
  CHECK(snap.events_of_type(now, "probe").empty());
}

TEST_CASE("one write transaction appends and recounts events atomically", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo root = must(store.create_run({}));
  REQUIRE(store.append(root.id, 0, std::vector{event("e1"), event("e2", "behavior.failed")}));
  RunInfo fork = must(store.fork(root.id, EventId("e2"), {}));

  auto reconciled = store.write([&](Writer& w) -> Result<std::size_t> {
    auto head = w.append(fork.id, 2, std::vector{event("t1", "behavior.failed"), event("t2")});
    if (!head) return std::unexpected(head.error());
    RunInfo now = *w.run(fork.id);
    CHECK(now.head == 4);
    CHECK(w.find_event(now, EventId("t2"))->seq == 4);
    std::size_t seen = 0;
    w.for_each_event(now, 3, [&](const EventView&) { return ++seen, true; });
    CHECK(seen == 2);
    return w.events_of_type(now, "behavior.failed", 2).size();
  });
  REQUIRE(reconciled);
  CHECK(*reconciled == 1);

  // A body that refuses rolls back everything it wrote.
  auto refused = store.write([&](Writer& w) -> Result<std::uint64_t> {
    REQUIRE(w.append(fork.id, 4, std::vector{event("t3")}));
    return w.append(fork.id, 4, std::vector{event("t4")});  // stale head: refused
  });
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == Refused::head_moved);
  CHECK(store.snapshot().run(fork.id)->head == 4);
}

TEST_CASE("a long read transaction does not block appends", "[store][concurrency]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  REQUIRE(store.append(run.id, 0, events("a", 10)));

  Snapshot reader = store.snapshot();
  RunInfo seen = *reader.run(run.id);
  std::uint64_t head = 10;
  std::thread writer([&] {
    for (int batch = 0; batch < 20; ++batch) {
      auto r = store.append(run.id, head, events("w" + std::to_string(batch) + "_", 50));
      if (r) head = *r;
    }
  });
  writer.join();  // returns while `reader` still holds its transaction
  CHECK(head == 10 + 20 * 50);
  CHECK(reader.count(seen) == 10);
  CHECK(reader.history(seen).size() == 10);
  auto fresh = store.snapshot();
  CHECK(fresh.run(run.id)->head == 1010);
}

TEST_CASE("opening a store twice in one process is refused", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s");
  CHECK_THROWS_WITH(EventStore(dir.path() / "s"), Catch::Contains("already open in this process"));
}

TEST_CASE("a store with an unknown schema version is refused naming both versions", "[store]") {
  forktrial::testing::TempDir dir;
  { EventStore store(dir.path() / "s"); }
  {
    // Rewrite the version the way a future forktrial would.
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    REQUIRE(mdb_env_open(env, (dir.path() / "s").c_str(), 0, 0644) == 0);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
    MDB_dbi meta;
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
    unsigned char v[4] = {0, 0, 0, 7};
    MDB_val key{14, const_cast<char*>("schema_version")};
    MDB_val value{4, v};
    REQUIRE(mdb_put(txn, meta, &key, &value, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
  }
  try {
    EventStore store(dir.path() / "s");
    FAIL("opened a store of schema version 7");
  } catch (const SchemaVersionMismatch& e) {
    CHECK(e.found() == 7);
    CHECK_THAT(e.what(), Catch::Contains("schema version 7") &&
                             Catch::Contains("reads schema versions 1 to 2"));
  }
}

TEST_CASE("the map grows as writes need room", "[store][map]") {
  forktrial::testing::TempDir dir;
  StoreOptions options = fixed_options();
  options.initial_map_size = 1 << 20;
  options.max_map_size = 64 << 20;
  EventStore store(dir.path() / "s", options);
  std::vector<std::byte> blob(3 << 20, std::byte{7});
  Digest d = store.put_blob(blob);
  CHECK(store.map_size() >= (4u << 20));
  CHECK(store.snapshot().blob(d)->size() == blob.size());
}

TEST_CASE("a full store says so and stays readable", "[store][map]") {
  forktrial::testing::TempDir dir;
  StoreOptions options = fixed_options();
  options.initial_map_size = 1 << 20;
  options.max_map_size = 2 << 20;
  Digest kept;
  {
    EventStore store(dir.path() / "s", options);
    RunInfo run = must(store.create_run({}));
    REQUIRE(store.append(run.id, 0, events("e", 5)));
    kept = store.put_blob(std::vector<std::byte>(100'000, std::byte{1}));
    std::vector<std::byte> too_big(3 << 20, std::byte{2});
    CHECK_THROWS_AS(store.put_blob(too_big), StoreFull);
    CHECK_THROWS_WITH(store.put_blob(too_big),
                      Catch::Contains("is full") && Catch::Contains("maximum map size"));
    auto snap = store.snapshot();
    CHECK(snap.run(run.id)->head == 5);
    CHECK(snap.has_blob(kept));
    // Smaller writes still succeed.
    CHECK(store.append(run.id, 5, event("e6")) == 6u);
  }
  options.max_map_size = 64 << 20;
  EventStore reopened(dir.path() / "s", options);
  CHECK(reopened.snapshot().has_blob(kept));
  std::vector<std::byte> big(3 << 20, std::byte{2});
  Digest d = reopened.put_blob(big);
  CHECK(reopened.snapshot().blob(d)->size() == big.size());
}

// The descriptors this process holds: fd -> readlink target.
std::map<int, std::string> held_descriptors() {
  std::map<int, std::string> held;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(entry.path(), ec);
    held[std::stoi(entry.path().filename().string())] = ec ? "?" : target.string();
  }
  return held;
}

TEST_CASE("every descriptor an open store adds to the process is close-on-exec", "[store]") {
  forktrial::testing::TempDir dir;
  const auto before = held_descriptors();
  EventStore store(dir.path() / "s", fixed_options());
  RunInfo run = must(store.create_run({}));
  REQUIRE(store.append(run.id, 0, events("e", 3)) == 3u);
  auto snap = store.snapshot();
  REQUIRE(snap.history(*snap.run(run.id)).size() == 3);

  std::vector<std::string> added;
  std::vector<std::string> inheritable;
  for (const auto& [fd, target] : held_descriptors()) {
    if (auto it = before.find(fd); it != before.end() && it->second == target) continue;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) continue;  // the listing's own descriptor, closed by now
    const auto name = std::filesystem::path(target).filename().string();
    added.push_back(name);
    if ((flags & FD_CLOEXEC) == 0) inheritable.push_back(std::to_string(fd) + " " + target);
  }
  // LMDB's files are among them, so the check below sees what it is about.
  CHECK(std::count(added.begin(), added.end(), "data.mdb") >= 1);
  CHECK(std::count(added.begin(), added.end(), "lock.mdb") == 1);
  CHECK(inheritable == std::vector<std::string>{});
}

// A worker opens a scratch store on a slot thread while its loop thread
// closes descriptors of its own (a finished trial's cancellation eventfd).
// Opening a store used to fstat every descriptor of the process to mark
// LMDB's close-on-exec; ThreadSanitizer (scripts/test runs the store's tests
// under it) reports that fstat against the other thread's close, since
// nothing orders the two. The threads here are left unordered on purpose:
// the relaxed flag only says when to close, it synchronizes nothing.
TEST_CASE("opening a store touches no descriptor another thread owns", "[store]") {
  forktrial::testing::TempDir dir;
  const int owned = ::eventfd(0, EFD_CLOEXEC);
  REQUIRE(owned >= 0);
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    EventStore store(dir.path() / "s", fixed_options());
    opened.store(true, std::memory_order_relaxed);
  });
  while (!opened.load(std::memory_order_relaxed)) std::this_thread::yield();
  CHECK(::close(owned) == 0);
  opener.join();
}

}  // namespace
}  // namespace forktrial::store

namespace forktrial::store {
namespace {

TEST_CASE("deleted runs leave nothing behind, and a fork keeps its parent", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", testing::fixed_options());
  const RunInfo root = *store.import_run({.id = RunId("run_root")}, testing::events("r", 5));
  const RunInfo fork = *store.fork(root.id, EventId("r3"), {.id = RunId("run_fork")});
  REQUIRE(store.append(fork.id, 3, testing::events("f", 4)) == 7u);
  const RunInfo grandchild = *store.fork(fork.id, EventId("f2"), {.id = RunId("run_grand")});
  const RunInfo other = *store.import_run({.id = RunId("run_other")}, testing::events("o", 2));

  // The fork has a fork of its own: it cannot go alone, and nothing goes.
  const std::vector<RunId> fork_only{fork.id};
  auto refused = store.delete_runs(fork_only);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message ==
        "cannot delete run run_fork: run run_grand forks from it; nothing was deleted");
  CHECK(store.snapshot().run(fork.id).has_value());
  const std::vector<RunId> unknown{RunId("run_nope")};
  CHECK(store.delete_runs(unknown).error().kind == Refused::unknown_run);
  const std::vector<RunId> twice{other.id, other.id};
  CHECK(store.delete_runs(twice).error().kind == Refused::invalid_input);

  // With its fork, it goes: its own events and their ids, not its parent's.
  const std::vector<RunId> both{grandchild.id, fork.id};
  const auto deleted = store.delete_runs(both);
  REQUIRE(deleted.has_value());
  CHECK(deleted->runs == 2);
  CHECK(deleted->events == 4);
  CHECK(deleted->bytes > 0);
  {
    auto snap = store.snapshot();
    CHECK_FALSE(snap.run(fork.id).has_value());
    CHECK_FALSE(snap.run(grandchild.id).has_value());
    std::vector<std::string> listed;
    for (const RunInfo& run : snap.runs()) listed.push_back(run.id.str());
    CHECK(listed == Strings{"run_root", "run_other"});
    const RunInfo kept = *snap.run(root.id);
    CHECK(kept.head == 5);
    CHECK(testing::ids_of(snap.history(kept)) == Strings{"r1", "r2", "r3", "r4", "r5"});
    CHECK(testing::ids_of(snap.history(*snap.run(other.id))) == Strings{"o1", "o2"});
  }
  // The ids are free again, and a new run under one starts empty: no event
  // or event id of the old one is read through it.
  const RunInfo again = *store.fork(root.id, EventId("r3"), {.id = RunId("run_fork")});
  CHECK(again.head == 3);
  REQUIRE(store.append(again.id, 3, testing::events("f", 1)) == 4u);
  CHECK(testing::ids_of(store.snapshot().history(*store.snapshot().run(again.id))) ==
        Strings{"r1", "r2", "r3", "f1"});
  // A run created after the deletion, numbered like none before it, reads
  // its own events only.
  const RunInfo fresh = *store.import_run({.id = RunId("run_fresh")}, testing::events("n", 1));
  CHECK(testing::ids_of(store.snapshot().history(fresh)) == Strings{"n1"});
}

TEST_CASE("a store counts the transactions it committed and the flushes it forced", "[store]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", fixed_options());
  const auto opened = store.write_counts();
  REQUIRE(store.create_run({.id = RunId("run_a"), .label = "a"}));
  // A transaction its body gives up on commits nothing.
  (void)store.write([](Writer&) -> Result<int> {
    return std::unexpected(Refusal(Refused::run_exists, "given up"));
  });
  const auto written = store.write_counts();
  CHECK(written.commits == opened.commits + 1);
  CHECK(written.syncs == opened.syncs);
  store.sync();
  CHECK(store.write_counts().syncs == opened.syncs + 1);
  CHECK(store.write_counts().commits == written.commits);
}

}  // namespace
}  // namespace forktrial::store
