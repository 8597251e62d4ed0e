// The result cache's key and its entries in the store (coordinator/result_cache.h).
#include "coordinator/result_cache.h"

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "store/event_store.h"
#include "tests/support/temp_dir.h"

using namespace forktrial;
using namespace forktrial::coordinator;
using forktrial::testing::TempDir;

namespace {

Digest digest_of(const std::string& text) {
  return Sha256::of(text);
}

// A trial's inputs as the coordinator holds them: its specification (packs
// are bundles), the segment of the parent's history up to the fork point,
// the archives of its packs, the executor and the runtime.
struct Inputs {
  std::string runtime = "forktrial 0.1.0";
  pack::Executor executor = pack::Executor::lua;
  sandbox::TrialSpecification spec;
  Digest segment = digest_of("the parent's history up to evt_031");
  std::vector<Digest> bundles;
  std::string owner = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

  Inputs() {
    spec.parent_run_id = store::RunId("run_chat");
    spec.at_event = store::EventId("evt_031");
    spec.label = "nightly greeter smoke@evt_031 #1";
    spec.candidate.root_dir = "bundle:" + digest_of("greeter's archive").hex();
    spec.candidate.expected_bundle_hash = digest_of("greeter's tree");
    spec.extra_packs.push_back(sandbox::PackSource{"bundle:" + digest_of("helper's archive").hex(),
                                                   digest_of("helper's tree"), true});
    spec.scenario = "scenarios/smoke.lua";
    bundles = {digest_of("helper's archive"), digest_of("greeter's archive")};
  }

  Digest key() const { return trial_cache_key(runtime, executor, spec, segment, bundles, owner); }
};

}  // namespace

TEST_CASE("a trial's cache key changes with a byte of any input it depends on",
          "[coordinator][cache]") {
  const Inputs base;
  const Digest key = base.key();
  CHECK(Inputs().key() == key);  // a function of the inputs alone

  const std::vector<std::pair<std::string, std::function<void(Inputs&)>>> changes = {
      {"the candidate's bytes (its archive)",
       [](Inputs& i) {
         i.spec.candidate.root_dir = "bundle:" + digest_of("greeter's archive.").hex();
         i.bundles.back() = digest_of("greeter's archive.");
       }},
      {"the candidate's pin",
       [](Inputs& i) { i.spec.candidate.expected_bundle_hash = digest_of("greeter's tree."); }},
      {"an extra pack's bytes",
       [](Inputs& i) { i.bundles.front() = digest_of("helper's archive."); }},
      {"an extra pack's pin",
       [](Inputs& i) { i.spec.extra_packs[0].expected_bundle_hash = digest_of("helper's tree."); }},
      {"an extra pack more",
       [](Inputs& i) {
         i.spec.extra_packs.push_back(i.spec.extra_packs[0]);
         i.bundles.insert(i.bundles.begin(), i.bundles.front());
       }},
      {"the scenario", [](Inputs& i) { i.spec.scenario = "scenarios/smokE.lua"; }},
      {"the scenario's function", [](Inputs& i) { i.spec.scenario += "::main"; }},
      {"a limit", [](Inputs& i) { i.spec.limits.max_events += 1; }},
      {"the wall clock", [](Inputs& i) { i.spec.limits.wall_clock_seconds += 0.001; }},
      {"the memory net", [](Inputs& i) { i.spec.limits.max_rss_bytes.reset(); }},
      {"an environment variable passed",
       [](Inputs& i) { i.spec.limits.env_passthrough.push_back("TZ"); }},
      {"the parent's history before the fork point",
       [](Inputs& i) { i.segment = digest_of("the parent's history up to evt_031."); }},
      {"the fork point", [](Inputs& i) { i.spec.at_event = store::EventId("evt_030"); }},
      {"the parent run", [](Inputs& i) { i.spec.parent_run_id = store::RunId("run_chaT"); }},
      {"the runtime's version", [](Inputs& i) { i.runtime = "forktrial 0.1.1"; }},
      {"the executor", [](Inputs& i) { i.executor = pack::Executor::activegraph; }},
      {"the client that submits it", [](Inputs& i) { i.owner[0] = 'R'; }},
      {"no client key", [](Inputs& i) { i.owner.clear(); }},
  };
  for (const auto& [what, change] : changes) {
    INFO(what);
    Inputs changed;
    change(changed);
    CHECK(changed.key() != key);
  }
}

TEST_CASE("a trial's label, which names its fork only, leaves its cache key as it is",
          "[coordinator][cache]") {
  Inputs relabelled;
  relabelled.spec.label = "another batch greeter smoke@evt_031 #2";
  CHECK(relabelled.key() == Inputs().key());
}

TEST_CASE("a cache entry is read back as written, the last one wins, and it dies with its fork",
          "[coordinator][cache]") {
  TempDir dir;
  store::EventStore store(dir.path() / "store");
  REQUIRE(store.create_run({.id = store::RunId("run_p"), .label = "parent"}));
  const store::NewEvent first{.id = store::EventId("evt_001"),
                              .type = "note",
                              .payload = "{}",
                              .timestamp = "2026-01-01T00:00:00Z"};
  REQUIRE(store.append(store::RunId("run_p"), 0, std::span(&first, 1)));
  REQUIRE(store.fork(store::RunId("run_p"), store::EventId("evt_001"),
                     {.id = store::RunId("run_a"), .label = "a"}));
  REQUIRE(store.fork(store::RunId("run_p"), store::EventId("evt_001"),
                     {.id = store::RunId("run_b"), .label = "b"}));
  const Digest key = digest_of("a key");
  CHECK(!find_cache_entry(store.snapshot(), key));

  const CacheEntry a{TrialId{JobId("job_a"), 3}, store::RunId("run_a"), Outcome::completed,
                     R"({"events_appended":1})"};
  const CacheEntry b{TrialId{JobId("job_b"), 0}, store::RunId("run_b"), Outcome::completed,
                     R"({"events_appended":2})"};
  const Instant at{std::chrono::milliseconds(1'700'000'000'000)};
  REQUIRE(store.write([&](store::Writer& w) { return put_cache_entry(w, key, a, at); }));
  CHECK(find_cache_entry(store.snapshot(), key) == a);
  CHECK(store.snapshot().run(cache_run_of(key)).has_value());
  CHECK(cache_run_of(key).str() == "forktrial.cache." + key.hex());
  REQUIRE(store.write([&](store::Writer& w) { return put_cache_entry(w, key, b, at); }));
  CHECK(find_cache_entry(store.snapshot(), key) == b);
  CHECK(!find_cache_entry(store.snapshot(), digest_of("another key")));

  const std::vector<store::RunId> collected{store::RunId("run_b")};
  REQUIRE(store.delete_runs(collected));
  CHECK(!find_cache_entry(store.snapshot(), key));
}

TEST_CASE("a fork is copied onto the same fork point with the source's own events only",
          "[coordinator][cache]") {
  TempDir dir;
  store::EventStore store(dir.path() / "store");
  REQUIRE(store.create_run({.id = store::RunId("run_p"), .label = "parent"}));
  std::vector<store::NewEvent> history;
  for (const char* id : {"evt_001", "evt_002"}) {
    history.push_back({.id = store::EventId(id),
                       .type = "note",
                       .payload = "{}",
                       .timestamp = "2026-01-01T00:00:00Z"});
  }
  REQUIRE(store.append(store::RunId("run_p"), 0, history));
  REQUIRE(store.fork(store::RunId("run_p"), store::EventId("evt_001"),
                     {.id = store::RunId("run_src"), .label = "source"}));
  const store::NewEvent own{.id = store::EventId("evt_own"),
                            .type = "note.added",
                            .payload = R"({"n":1})",
                            .timestamp = "2026-01-01T00:00:01Z",
                            .actor = "candidate"};
  REQUIRE(store.append(store::RunId("run_src"), 1, std::span(&own, 1)));

  sandbox::TrialSpecification spec;
  spec.parent_run_id = store::RunId("run_p");
  spec.at_event = store::EventId("evt_001");
  auto copied = store.write([&](store::Writer& w) {
    return copy_fork(w, spec, {.id = store::RunId("run_copy"), .label = "copy"},
                     store::RunId("run_src"));
  });
  REQUIRE(copied);
  CHECK(*copied == 2);
  const auto snapshot = store.snapshot();
  const auto copy = snapshot.run(store::RunId("run_copy"));
  REQUIRE(copy);
  REQUIRE(copy->fork_of);
  CHECK(copy->fork_of->event_id == store::EventId("evt_001"));
  const auto events = snapshot.history(*copy);
  REQUIRE(events.size() == 2);
  CHECK(events[0].id == store::EventId("evt_001"));
  CHECK(static_cast<const store::NewEvent&>(events[1]) == own);

  // Where the source's events name their run (the runtime's provenance),
  // the copy's name the copy.
  const store::NewEvent named{
      .id = store::EventId("evt_named"),
      .type = "object.created",
      .payload = R"({"object":{"provenance":{"run_id":"run_src"}},"note":"run_src, run_src"})",
      .timestamp = "2026-01-01T00:00:02Z",
      .actor = "runtime"};
  REQUIRE(store.append(store::RunId("run_src"), 2, std::span(&named, 1)));
  REQUIRE(store.write([&](store::Writer& w) {
    return copy_fork(w, spec, {.id = store::RunId("run_copy_long"), .label = "copy"},
                     store::RunId("run_src"));
  }));
  const auto renamed =
      store.snapshot().history(*store.snapshot().run(store::RunId("run_copy_long")));
  REQUIRE(renamed.size() == 3);
  CHECK(
      renamed[2].payload ==
      R"({"object":{"provenance":{"run_id":"run_copy_long"}},"note":"run_copy_long, run_copy_long"})");

  auto gone = store.write([&](store::Writer& w) {
    return copy_fork(w, spec, {.id = store::RunId("run_copy2"), .label = "copy"},
                     store::RunId("run_nothing"));
  });
  REQUIRE(!gone);
  CHECK(gone.error().kind == store::Refused::unknown_run);
  CHECK(!store.snapshot().run(store::RunId("run_copy2")));
}
