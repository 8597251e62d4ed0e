// Payload nesting is bounded wherever payloads enter the store: a payload
// nested tens of thousands of levels deep must be refused with a clear
// error, never crash whoever parses or re-serializes it.
#include "store/payload.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "store/event_store.h"
#include "tests/store/store_test_support.h"
#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

std::string nested(std::size_t depth) {
  return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
}

TEST_CASE("nesting depth counts arrays and objects, not brackets in strings", "[store][payload]") {
  CHECK(json_nesting_depth("{}") == 1);
  CHECK(json_nesting_depth(R"({"a":{"b":[]}})") == 3);
  CHECK(json_nesting_depth(R"({"a":"[[[[{{{{","b":[1,[2]]})") == 3);
  CHECK(json_nesting_depth(R"({"a":"\"[[[","b":"\\"})") == 1);
  CHECK(json_nesting_depth("[] [] []") == 1);
  CHECK(json_nesting_depth(nested(kMaxPayloadDepth)) == kMaxPayloadDepth);
  CHECK_FALSE(payload_depth_problem(nested(kMaxPayloadDepth)));
  CHECK(payload_depth_problem(nested(kMaxPayloadDepth + 1)) ==
        "nested 257 levels deep (arrays and objects); payloads may nest at most 256 levels");
}

TEST_CASE("the store refuses an event whose payload nests too deep", "[store][payload]") {
  forktrial::testing::TempDir dir;
  EventStore store(dir.path() / "s", testing::fixed_options());
  auto run = store.create_run({});
  REQUIRE(run);
  auto deep = testing::event("evt_001");
  deep.payload = nested(60'000);
  auto refused = store.append(run->id, 0, deep);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == Refused::invalid_event);
  CHECK_THAT(refused.error().message,
             Catch::Contains("event evt_001 payload is nested 60000 levels deep (arrays and "
                             "objects); payloads may nest at most 256 levels"));
  CHECK(event_problem(deep).has_value());
  deep.payload = nested(kMaxPayloadDepth);
  CHECK(store.append(run->id, 0, deep));
}

TEST_CASE("run import of a deeply nested payload fails cleanly and imports nothing",
          "[store][payload][cli]") {
  forktrial::testing::TempDir dir;
  const auto input =
      dir.write("deep.jsonl",
                R"({"id":"evt_001","type":"note","timestamp":"2026-01-02T03:04:05Z","payload":)" +
                    nested(60'000) + "}\n");
  const std::string store = (dir.path() / "store").string();
  auto r = forktrial::testing::run_forktrial({"run", "import", input.string(), "--store", store});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("line 1: the event is nested 60001 levels deep"));
  CHECK(r.out.empty());
}

}  // namespace
}  // namespace forktrial::store
