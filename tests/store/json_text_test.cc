// Payload text checked and re-emitted without re-serializing: known answers
// for Python's json.dumps output (computed with CPython 3) and one test per
// kind of malformed payload.
#include "store/json_text.h"

#include <catch2/catch.hpp>

namespace forktrial::store::json_text {
namespace {

std::string python(std::string_view value) {
  std::string out;
  REQUIRE(append_python_json(out, value));
  return out;
}

TEST_CASE("payload text is re-emitted as Python json.dumps writes it", "[import][json_text]") {
  // json.dumps(json.loads('{"b":1,"a":[true,null,{}],"c":[]}'))
  CHECK(python(R"({"b":1,"a":[true,null,{}],"c":[]})") ==
        R"({"b": 1, "a": [true, null, {}], "c": []})");
  // Whitespace in the stored text does not matter, key order does.
  CHECK(python(" {\n\"z\" :\t{ \"y\" : [ 1 , 2 ] } } ") == R"({"z": {"y": [1, 2]}})");
  // Numbers keep their spelling: 64 bits are not enough for these.
  CHECK(python(R"({"n": 123456789012345678901234567890, "m": -0.5e-7, "f": 1.0})") ==
        R"({"n": 123456789012345678901234567890, "m": -0.5e-7, "f": 1.0})");
  // json.dumps("é 東 😀 \u200f \x7f \x01 \" \\ / \n\r\t\b\f")
  CHECK(python("{\"s\": \"é 東 😀 \u200f \x7f \\u0001 \\\" \\\\ \\/ \\n\\r\\t\\b\\f\"}") ==
        R"({"s": "\u00e9 \u6771 \ud83d\ude00 \u200f \u007f \u0001 \" \\ / \n\r\t\b\f"})");
  // Escapes in the stored text are decoded and written Python's way.
  CHECK(python(R"({"s": "\u00E9\ud83d\ude00\u0041"})") == R"({"s": "\u00e9\ud83d\ude00A"})");
  // Keys are strings like any other.
  CHECK(python(R"({"clé": 1})") == R"({"cl\u00e9": 1})");
}

TEST_CASE("strings outside payloads are written as Python writes them", "[import][json_text]") {
  std::string out;
  append_python_string(out, "café \x1b[2J \xf0\x9f\x98\x80");
  CHECK(out == R"("caf\u00e9 \u001b[2J \ud83d\ude00")");
  out.clear();
  append_python_string(out, "bad \xff");
  CHECK(out == R"("bad \ufffd")");
}

TEST_CASE("each kind of malformed payload is refused naming what is wrong", "[import][json_text]") {
  CHECK(payload_problem(R"({"a": 1})") == std::nullopt);
  CHECK(payload_problem(R"({"a": 1)") == "not valid JSON: expected ',' or '}' at byte 7");
  CHECK(payload_problem(R"({"a": 1} x)") ==
        "not valid JSON: unexpected text after the value at byte 9");
  CHECK(payload_problem("[1]") == "a JSON array, not an object");
  CHECK(payload_problem(R"("x")") == "a JSON string, not an object");
  CHECK(payload_problem(R"({"a": 01})") == "not valid JSON: expected ',' or '}' at byte 7");
  CHECK(payload_problem(R"({"a": 1.})") == "not valid JSON: malformed number at byte 8");
  CHECK(payload_problem("{\"a\": \"caf\xe9\"}") ==
        "not valid JSON: text that is not valid UTF-8 at byte 10");
  CHECK(payload_problem("{\"a\": \"\xed\xa0\x80\"}") ==
        "not valid JSON: text that is not valid UTF-8 at byte 7");
  CHECK(payload_problem("{\"a\": \"\xc0\xaf\"}") ==
        "not valid JSON: text that is not valid UTF-8 at byte 7");
  CHECK(payload_problem("{\"a\": \"\xf4\x90\x80\x80\"}") ==
        "not valid JSON: text that is not valid UTF-8 at byte 7");
  CHECK(payload_problem(R"({"a": "\ud800"})") ==
        "not valid JSON: an unpaired surrogate escape at byte 13");
  CHECK(payload_problem(R"({"a": "\x"})") == "not valid JSON: an unknown escape at byte 8");
  CHECK(payload_problem("{\"a\": \"line\nbreak\"}") ==
        "not valid JSON: a control character inside a string at byte 11");
  CHECK(payload_problem(R"({"a": nul})") == "not valid JSON: unexpected character at byte 6");
  CHECK(payload_problem(R"({"a": [Infinity]})") ==
        "holds the value Infinity at payload[\"a\"][0], which is not JSON (Python writes it for "
        "a float that is not finite); forktrial refuses it so that every trial can read the run");
  const std::string deep = "{\"a\":" + std::string(300, '[') + std::string(300, ']') + "}";
  CHECK(payload_problem(deep) ==
        "nested 301 levels deep (arrays and objects); payloads may nest at most 256 levels");
}

TEST_CASE("an object's members are its keys and the exact bytes of their values",
          "[import][json_text]") {
  auto members = object_members(R"({"id": "e1", "payload": {"b" : 1,"a":2} , "n": NaN})");
  REQUIRE(members);
  REQUIRE(members->size() == 3);
  CHECK((*members)[1].first == "payload");
  CHECK((*members)[1].second == R"({"b" : 1,"a":2})");
  CHECK((*members)[2].second == "NaN");
  CHECK(object_members("[1]").error().message == "expected a JSON object, found array");
  CHECK(first_non_finite(R"({"x": {"y": [0, NaN]}})", "payload") ==
        std::pair<std::string, std::string>("payload[\"x\"][\"y\"][1]", "NaN"));
}

}  // namespace
}  // namespace forktrial::store::json_text
