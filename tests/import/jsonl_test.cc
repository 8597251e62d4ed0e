#include "import/jsonl.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "store/event_store.h"
#include "store/json_text.h"
#include "tests/support/temp_dir.h"

namespace forktrial::import::jsonl {
namespace {

using store::Event;
using store::EventId;
using store::EventView;
using store::NewEvent;
namespace json_text = store::json_text;

const std::string kGood =
    R"({"id":"evt_001","type":"goal.created","payload":{"goal":"hi"},"actor":"user","frame_id":null,"caused_by":null,"timestamp":"2026-01-02T03:04:05.000001+00:00"})";

std::expected<std::vector<NewEvent>, LineError> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_events(in);
}

// Parses `bad` as line 2 after a good line and returns the error message.
std::string error_on_line_2(const std::string& bad) {
  auto result = parse(kGood + "\n" + bad + "\n");
  REQUIRE_FALSE(result);
  CHECK(result.error().line == 2);
  return result.error().message;
}

TEST_CASE("a well-formed JSON Lines file parses into events", "[import][jsonl]") {
  auto result = parse(kGood + "\n\n" +
                      R"({"id":"evt_002","type":"note","payload":{"b":1,"a":[true]},)"
                      R"("timestamp":"2026-01-02T03:04:06Z","caused_by":"evt_001","seq":9})" +
                      "\n");
  REQUIRE(result);
  REQUIRE(result->size() == 2);
  const NewEvent& first = (*result)[0];
  CHECK(first.id.str() == "evt_001");
  CHECK(first.type == "goal.created");
  CHECK(first.payload == R"({"goal":"hi"})");
  CHECK(first.actor == std::optional<std::string>("user"));
  CHECK_FALSE(first.frame_id.has_value());
  CHECK(first.timestamp == "2026-01-02T03:04:05.000001+00:00");
  const NewEvent& second = (*result)[1];
  CHECK(second.payload == R"({"b":1,"a":[true]})");  // the line's own bytes
  CHECK(second.caused_by == std::optional<EventId>(EventId("evt_001")));
  CHECK_FALSE(second.actor.has_value());  // absent reads as null
}

TEST_CASE("bad JSON is refused with its line number", "[import][jsonl]") {
  CHECK_THAT(error_on_line_2(R"({"id": "evt_002", )"), Catch::StartsWith("line 2: not valid JSON"));
}

TEST_CASE("a number too large for a double is refused with its line number", "[import][jsonl]") {
  // The JSON parser throws out_of_range for it, which escaped as a crash.
  CHECK_THAT(error_on_line_2("2222e20000000"),
             Catch::StartsWith("line 2: not valid JSON: [json.exception.out_of_range.406]"));
  // Within a payload it is refused too, whichever check finds it first.
  CHECK_FALSE(error_on_line_2(R"({"id":"evt_002","type":"t","payload":{"x":1e400},)"
                              R"("timestamp":"2026-01-02T03:04:06Z"})")
                  .empty());
}

TEST_CASE("a line that is not an object is refused", "[import][jsonl]") {
  CHECK(error_on_line_2("[1,2]") == "line 2: expected a JSON object, found array");
}

TEST_CASE("each missing required field is refused by name", "[import][jsonl]") {
  CHECK(error_on_line_2(R"({"type":"t","payload":{},"timestamp":"2026-01-01T00:00:00Z"})") ==
        "line 2: missing field \"id\"");
  CHECK(error_on_line_2(R"({"id":"e","payload":{},"timestamp":"2026-01-01T00:00:00Z"})") ==
        "line 2: missing field \"type\"");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","timestamp":"2026-01-01T00:00:00Z"})") ==
        "line 2: missing field \"payload\"");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":{}})") ==
        "line 2: missing field \"timestamp\"");
}

TEST_CASE("each mistyped field is refused naming the type found", "[import][jsonl]") {
  const std::string ts = R"("timestamp":"2026-01-01T00:00:00Z")";
  CHECK(error_on_line_2(R"({"id":7,"type":"t","payload":{},)" + ts + "}") ==
        "line 2: field \"id\" must be a string, found number");
  CHECK(error_on_line_2(R"({"id":"e","type":null,"payload":{},)" + ts + "}") ==
        "line 2: field \"type\" must be a string, found null");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":"{}",)" + ts + "}") ==
        "line 2: field \"payload\" must be an object, found string");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":{},"actor":1,)" + ts + "}") ==
        "line 2: field \"actor\" must be a string or null, found number");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":{},"frame_id":[],)" + ts + "}") ==
        "line 2: field \"frame_id\" must be a string or null, found array");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":{},"caused_by":{},)" + ts + "}") ==
        "line 2: field \"caused_by\" must be a string or null, found object");
  CHECK(error_on_line_2(R"({"id":"e","type":"t","payload":{},"timestamp":17})") ==
        "line 2: field \"timestamp\" must be a string, found number");
}

TEST_CASE("an empty id or type is refused", "[import][jsonl]") {
  CHECK(
      error_on_line_2(R"({"id":"","type":"t","payload":{},"timestamp":"2026-01-01T00:00:00Z"})") ==
      "line 2: field \"id\" is empty");
  CHECK(
      error_on_line_2(R"({"id":"e","type":"","payload":{},"timestamp":"2026-01-01T00:00:00Z"})") ==
      "line 2: field \"type\" is empty");
}

TEST_CASE("a timestamp that is not ISO-8601 UTC is refused", "[import][jsonl]") {
  // Every timestamp the runtime refuses, including a lower-case 'z' and a
  // date that does not exist, which an import used to accept.
  for (const char* ts : {"yesterday", "2026-01-01 00:00:00Z", "2026-01-01T00:00:00+02:00",
                         "2026-01-01T00:00:00", "2026-01-01T00:00:00.Z", "2026-02-30T10:00:00z",
                         "2026-02-30T10:00:00Z", "2026-01-30T10:00:00z", "2026-01-30t10:00:00Z"}) {
    INFO(ts);
    CHECK_THAT(
        error_on_line_2(R"({"id":"e","type":"t","payload":{},"timestamp":")" + std::string(ts) +
                        "\"}"),
        Catch::StartsWith("line 2: field \"timestamp\": timestamp \"" + std::string(ts) + "\" ") &&
            Catch::EndsWith("; expected ISO-8601 UTC such as 2024-05-01T12:00:00.000Z"));
  }
}

// A line whose text field `field` holds `json_string` (JSON string syntax,
// quotes included); every other field is valid.
std::string line_with(const std::string& field, const std::string& json_string) {
  std::string line = R"({"payload":{},"timestamp":"2026-01-01T00:00:00Z")";
  for (const char* name : {"id", "type", "actor", "frame_id", "caused_by"}) {
    line += ",\"" + std::string(name) + "\":" + (field == name ? json_string : "\"x\"");
  }
  return line + "}";
}

TEST_CASE("a text field with a control character is refused naming its line and field",
          "[import][jsonl]") {
  for (const char* field : {"id", "type", "actor", "frame_id", "caused_by"}) {
    INFO(field);
    CHECK_THAT(error_on_line_2(line_with(field, R"("\u001b[2J")")),
               Catch::StartsWith("line 2: field \"" + std::string(field) + "\"") &&
                   Catch::Contains("contains the control character U+001B at offset 0"));
    CHECK_THAT(error_on_line_2(line_with(field, R"("a\u0000b")")),
               Catch::Contains("contains the control character U+0000 at offset 1"));
    CHECK_THAT(error_on_line_2(line_with(field, R"("csi \u009b")")),
               Catch::Contains("contains the control character U+009B at offset 4"));
  }
}

TEST_CASE("a text field beyond its length bound is refused naming its line and field",
          "[import][jsonl]") {
  for (const char* field : {"type", "actor", "frame_id"}) {
    INFO(field);
    CHECK_THAT(error_on_line_2(line_with(field, "\"" + std::string(1025, 'x') + "\"")),
               Catch::StartsWith("line 2: field \"" + std::string(field) + "\"") &&
                   Catch::Contains("is 1025 bytes long; the limit is 1024"));
  }
  for (const char* field : {"id", "caused_by"}) {
    INFO(field);
    CHECK_THAT(error_on_line_2(line_with(field, "\"" + std::string(251, 'x') + "\"")),
               Catch::StartsWith("line 2: field \"" + std::string(field) + "\"") &&
                   Catch::Contains("is 251 bytes long; the limit is 250"));
  }
}

TEST_CASE("text that is not valid UTF-8 is refused naming its line", "[import][jsonl]") {
  // The JSON parser itself refuses such bytes (and lone surrogate escapes).
  CHECK_THAT(error_on_line_2(line_with("actor", "\"caf\xe9\"")),
             Catch::StartsWith("line 2: not valid JSON"));
  CHECK_THAT(error_on_line_2(line_with("type", R"("\ud800")")),
             Catch::StartsWith("line 2: not valid JSON"));
}

TEST_CASE("a repeated event id is refused naming both lines", "[import][jsonl]") {
  auto result =
      parse(kGood + "\n" +
            R"({"id":"evt_002","type":"t","payload":{},"timestamp":"2026-01-01T00:00:00Z"})" +
            "\n\n" + kGood + "\n");
  REQUIRE_FALSE(result);
  CHECK(result.error().line == 4);
  CHECK(result.error().message == "line 4: event id \"evt_001\" already appears on line 1");
}

TEST_CASE("a payload key repeated within one object is refused naming the key and the object",
          "[import][jsonl]") {
  // Python's json.loads keeps the last of them: the bytes would say one thing
  // to forktrial's export and another to activegraph.
  CHECK(error_on_line_2(R"({"id":"evt_002","type":"t","timestamp":"2026-01-01T00:00:00Z",)"
                        R"("payload":{"a":{"k":1,"b":2,"k":3}}})") ==
        "line 2: field \"payload\" holds the key [\"k\"] twice in "
        "payload[\"a\"]; activegraph reads only the last of them, so what a trial reads and what "
        "forktrial would export could differ from what activegraph reads");
  // The same key in two objects is no repeat.
  CHECK(parse(R"({"id":"evt_001","type":"t","timestamp":"2026-01-01T00:00:00Z",)"
              R"("payload":{"k":{"k":1},"j":{"k":2}}})"));
}

TEST_CASE("an exported line parses back into the same event", "[import][jsonl]") {
  EventView view;
  view.id = "evt_9";
  view.type = "patch.applied";
  view.payload = R"({"data": {"x": "é\n"}, "id": "greeting#1"})";  // as activegraph stores it
  view.timestamp = "2026-01-02T03:04:05Z";
  view.frame_id = "frame";
  view.caused_by = "evt_8";
  view.seq = 9;
  std::string line = to_line(view);
  CHECK(line ==
        R"({"id": "evt_9", "type": "patch.applied", "payload": {"data": {"x": "\u00e9\n"}, )"
        R"("id": "greeting#1"}, "actor": null, "frame_id": "frame", "caused_by": "evt_8", )"
        R"("timestamp": "2026-01-02T03:04:05Z"})");
  auto parsed = parse(line);
  REQUIRE(parsed);
  NewEvent back = parsed->at(0);
  Event expected = view.to_event();
  CHECK(nlohmann::json::parse(back.payload) == nlohmann::json::parse(expected.payload));
  back.payload = expected.payload;
  CHECK(back == static_cast<const NewEvent&>(expected));
}

TEST_CASE("an exported line is written whatever bytes an older store holds", "[import][jsonl]") {
  EventView view;
  view.id = "evt_1";
  view.type = "bad \xff type";
  view.payload = "{}";
  view.timestamp = "2026-01-02T03:04:05Z";
  view.actor = "\xc3";
  view.seq = 1;
  std::string line;
  REQUIRE_NOTHROW(line = to_line(view));
  auto parsed = nlohmann::json::parse(line);
  CHECK(parsed["type"] == "bad \xEF\xBF\xBD type");
  CHECK(parsed["actor"] == "\xEF\xBF\xBD");
}

TEST_CASE("an import line nested 60000 levels deep is refused, naming the line",
          "[import][payload][jsonl]") {
  const std::string deep = "{\"a\":" + std::string(59'999, '[') + std::string(59'999, ']') + "}";
  auto parsed =
      parse(R"({"id":"evt_001","type":"note","payload":{},"timestamp":"2026-01-02T03:04:05Z"})"
            "\n"
            R"({"id":"evt_002","type":"note","timestamp":"2026-01-02T03:04:05Z","payload":)" +
            deep + "}\n");
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().line == 2);
  CHECK(parsed.error().message ==
        "line 2: the event is nested 60001 levels deep (arrays and objects); payloads may nest "
        "at most 256 levels");
  CHECK(json_text::payload_problem(deep) ==
        "nested 60000 levels deep (arrays and objects); payloads may nest at most 256 levels");
}

}  // namespace
}  // namespace forktrial::import::jsonl
