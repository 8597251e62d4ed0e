#include "base/text.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace forktrial;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

}  // namespace

TEST_CASE("code points are decoded one sequence at a time, invalid bytes one by one",
          "[base][text]") {
  std::vector<std::pair<std::int32_t, std::string>> seen;
  for_each_code_point(
      "a\xC3\xA9\xFF\xE2\x9C\x93\xE2\x9C",
      [&](std::int32_t c, std::string_view bytes) { seen.emplace_back(c, std::string(bytes)); });
  CHECK(seen == std::vector<std::pair<std::int32_t, std::string>>{{'a', "a"},
                                                                  {0xE9, "\xC3\xA9"},
                                                                  {-1, "\xFF"},
                                                                  {0x2713, "\xE2\x9C\x93"},
                                                                  {-1, "\xE2"},
                                                                  {-1, "\x9C"}});
  CHECK(decode_utf8("\xF0\x9F\x98\x80").value == 0x1F600);
  CHECK(decode_utf8("\xF0\x9F\x98\x80").size == 4);
}

TEST_CASE("overlong forms, surrogates and code points beyond U+10FFFF are invalid",
          "[base][text]") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain \xC3\xA9 \xE2\x9C\x93 \xF4\x8F\xBF\xBF"));
  CHECK(first_invalid_utf8("ab\xC0\xAF") == 2u);         // overlong "/"
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0u);       // U+D800
  CHECK(first_invalid_utf8("x\xF4\x90\x80\x80") == 1u);  // U+110000
  CHECK(first_invalid_utf8("abc\xC3") == 3u);            // truncated
  CHECK(first_invalid_utf8("\x80") == 0u);               // lone continuation
  CHECK_FALSE(first_invalid_utf8(std::string("nul\0inside", 10)).has_value());
}

TEST_CASE("control characters are C0, DEL and C1 only", "[base][text]") {
  for (std::int32_t c : {0x00, 0x09, 0x0A, 0x1B, 0x1F, 0x7F, 0x80, 0x9B, 0x9F}) {
    INFO(c);
    CHECK(is_control(c));
  }
  for (std::int32_t c : {0x20, 0x7E, 0xA0, 0xE9, 0x202E, 0xFFFD, -1}) {
    INFO(c);
    CHECK_FALSE(is_control(c));
  }
}

TEST_CASE("sanitizing replaces each invalid byte with U+FFFD and keeps valid text",
          "[base][text]") {
  CHECK(sanitize_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(sanitize_utf8("a\xFF\xFE"
                      "b") == "a" + kFffd + kFffd + "b");
  CHECK(sanitize_utf8("\xED\xA0\x80") == kFffd + kFffd + kFffd);
  CHECK(sanitize_utf8(std::string("\0\x1b", 2)) == std::string("\0\x1b", 2));
}

TEST_CASE("a UTF-8 prefix never splits a sequence", "[base][text]") {
  CHECK(utf8_prefix("ab\xE2\x9C\x93"
                    "c",
                    4) == "ab");
  CHECK(utf8_prefix("ab\xE2\x9C\x93"
                    "c",
                    5) == "ab\xE2\x9C\x93");
  CHECK(utf8_prefix("ab\xFF"
                    "c",
                    3) == "ab\xFF");
  CHECK(utf8_prefix("abc", 10) == "abc");
  CHECK(utf8_prefix("abc", 0).empty());
}

TEST_CASE("bounded text fits its bound and says how many bytes were cut", "[base][text]") {
  CHECK(bounded_text("short", 64) == "short");
  CHECK(bounded_text("bad \xFF", 64) == "bad " + kFffd);

  const std::string big = "head " + std::string(1 << 20, 'x');
  const std::string bounded = bounded_text(big, 1000);
  CHECK(bounded.size() <= 1000);
  CHECK(bounded.starts_with("head xxx"));
  const auto marker = bounded.rfind(" [... ");
  REQUIRE(marker != std::string::npos);
  CHECK(bounded.substr(marker) == " [... " + std::to_string(big.size() - marker) + " bytes cut]");

  // Cut at a code-point boundary, and replacements count against the bound.
  const std::string checks = bounded_text(std::string(1000, '\xFF') + "\xE2\x9C\x93", 100);
  CHECK(checks.size() <= 100);
  CHECK(is_valid_utf8(checks));
  const auto cut_at = checks.find(" [... ");
  REQUIRE(cut_at != std::string::npos);
  CHECK(cut_at % 3 == 0);
  CHECK(checks.substr(cut_at) == " [... " + std::to_string(1003 - cut_at / 3) + " bytes cut]");

  // Text that fits only before sanitizing is cut too.
  const std::string grows = bounded_text(std::string(64, '\xFF'), 64);
  CHECK(grows.size() <= 64);
  CHECK(grows.ends_with(" bytes cut]"));
}

TEST_CASE("escaping renders controls, invalid bytes and display breakers visibly", "[base][text]") {
  CHECK(escape_controls("plain caf\xC3\xA9 \\x41") == "plain caf\xC3\xA9 \\x41");
  CHECK(escape_controls("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(escape_controls(std::string("\0\x1b[2J\x7f", 6)) == "\\x00\\x1b[2J\\x7f");
  CHECK(escape_controls("\xC2\x9B"
                        "2J \xC2\x85") == "\\u{9b}2J \\u{85}");
  CHECK(escape_controls("\xFF\xC3") == "\\xff\\xc3");
  CHECK(escape_controls("evil\xE2\x80\xAEtxt \xE2\x81\xA6 \xE2\x80\xA8") ==
        "evil\\u{202e}txt \\u{2066} \\u{2028}");
  CHECK(escape_controls("\xEF\xBF\xBD \xE2\x9C\x93") == "\xEF\xBF\xBD \xE2\x9C\x93");
}

TEST_CASE("plain text problems name the length, the bad byte or the control character",
          "[base][text]") {
  CHECK_FALSE(plain_text_problem("caf\xC3\xA9 \xE2\x80\xAE", 64).has_value());
  CHECK_FALSE(plain_text_problem("", 0).has_value());
  CHECK(plain_text_problem(std::string(65, 'a'), 64) == "is 65 bytes long; the limit is 64");
  CHECK(plain_text_problem("ok\xFF", 64) == "is not valid UTF-8 (byte 0xFF at offset 2)");
  CHECK(plain_text_problem("ok\x1b[2J", 64) == "contains the control character U+001B at offset 2");
  CHECK(plain_text_problem(std::string("\0", 1), 64) ==
        "contains the control character U+0000 at offset 0");
  CHECK(plain_text_problem("\xC3\xA9\xC2\x9B", 64) ==
        "contains the control character U+009B at offset 2");
  // The length is checked first: a huge value is not scanned.
  CHECK(plain_text_problem(std::string(100, '\xFF'), 10) == "is 100 bytes long; the limit is 10");
}

TEST_CASE("prose may hold tabs and line breaks, and no other control character", "[base][text]") {
  CHECK(plain_text_problem("a\tb\r\nc", 64) == "contains the control character U+0009 at offset 1");
  CHECK_FALSE(plain_text_problem("a\tb\r\nc", 64, LineBreaks::allowed).has_value());
  CHECK(plain_text_problem("a\nb\x1b[2J", 64, LineBreaks::allowed) ==
        "contains the control character U+001B at offset 3");
  CHECK(plain_text_problem("\n\xC2\x9B", 64, LineBreaks::allowed) ==
        "contains the control character U+009B at offset 1");
  CHECK(plain_text_problem("a\x0b", 64, LineBreaks::allowed) ==
        "contains the control character U+000B at offset 1");
}

TEST_CASE("excerpts are short, escaped and quoted", "[base][text]") {
  CHECK(quoted_excerpt("evt_1") == "\"evt_1\"");
  CHECK(quoted_excerpt("a\x1b[2J") == "\"a\\x1b[2J\"");
  CHECK(quoted_excerpt(std::string(16 << 20, 'x')) == "\"" + std::string(40, 'x') + "...\"");
  CHECK(quoted_excerpt(std::string(39, 'x') + "\xE2\x9C\x93") ==
        "\"" + std::string(39, 'x') + "...\"");
}

TEST_CASE("a named text problem quotes the value between the name and the problem",
          "[base][text]") {
  CHECK_FALSE(named_text_problem("label", "fine", 64).has_value());
  CHECK(named_text_problem("field \"actor\"", "\x1b[2J", 64) ==
        "field \"actor\" \"\\x1b[2J\" contains the control character U+001B at offset 0");
  CHECK(named_text_problem("run id", std::string(100, 'r'), 50) ==
        "run id \"" + std::string(40, 'r') + "...\" is 100 bytes long; the limit is 50");
}

TEST_CASE("bounded escaping fits its bound and counts the bytes of the text cut", "[base][text]") {
  CHECK(bounded_escaped("a\nb", 64) == "a\\nb");
  const std::string text = std::string(1000, '\x1b') + "tail";
  const std::string escaped = bounded_escaped(text, 200);
  CHECK(escaped.size() <= 200);
  const auto cut_at = escaped.find(" [... ");
  REQUIRE(cut_at != std::string::npos);
  CHECK(cut_at % 4 == 0);  // whole escapes only
  CHECK(escaped.substr(0, 8) == "\\x1b\\x1b");
  CHECK(escaped.substr(cut_at) == " [... " + std::to_string(1004 - cut_at / 4) + " bytes cut]");
}

TEST_CASE("text splits into lines at newlines only", "[base][text]") {
  using Lines = std::vector<std::string_view>;
  CHECK(split_lines("").empty());
  CHECK(split_lines("one") == Lines{"one"});
  CHECK(split_lines("a\nb\n") == Lines{"a", "b"});
  CHECK(split_lines("a\n\nb\r") == Lines{"a", "", "b\r"});
  CHECK(split_lines("\n") == Lines{""});
}
