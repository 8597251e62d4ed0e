// Text from untrusted sources: UTF-8 decoding, validation, repair, bounding
// and a visible rendering of control characters.
//
// Candidates and imported runs are adversaries, so any text they produce may
// be invalid UTF-8, hold control characters (ANSI escapes, NUL, newlines) or
// be megabytes long. These are the primitives every component uses before
// such text is stored, serialized or shown; which rule applies where (the
// store's field limits, the trial tail's bounds) belongs to the component.
//
// UTF-8 is decoded strictly (utf8proc's rules): overlong forms, surrogates
// (U+D800..U+DFFF) and code points above U+10FFFF are invalid. A byte that
// does not start a valid sequence is one invalid unit; decoding resumes at
// the next byte.
//
// "Control characters" are Unicode's Cc category: C0 (U+0000..U+001F), DEL
// (U+007F) and C1 (U+0080..U+009F).
//
// Every function is pure and thread-safe; none throws except std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial {

// The first UTF-8 sequence of non-empty `text`: its code point and its
// length in bytes, or code point -1 and length 1 when the first byte does not
// start a valid sequence.
struct CodePoint {
  std::int32_t value = -1;
  std::size_t size = 1;
};
CodePoint decode_utf8(std::string_view text);

// Calls visit(code_point, bytes) for each sequence of `text` in order, with
// code point -1 and the single byte for an invalid unit.
template <typename Visit>
void for_each_code_point(std::string_view text, Visit&& visit) {
  while (!text.empty()) {
    const CodePoint point = decode_utf8(text);
    visit(point.value, text.substr(0, point.size));
    text.remove_prefix(point.size);
  }
}

// The offset of the first byte that does not start a valid UTF-8 sequence,
// or nullopt when all of `text` is valid UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);
bool is_valid_utf8(std::string_view text);

// C0, DEL or C1.
bool is_control(std::int32_t code_point);

// A character that shows nothing or changes how the text around it shows,
// so that two names that print alike differ by it: Unicode's format
// characters (Cf: U+200B, U+2060, U+FEFF, the bidirectional controls), its
// separators other than the ASCII space (Zs, Zl, Zp: U+00A0, U+2028, ...),
// and the letters and marks that render as nothing (U+034F, the Hangul
// fillers U+115F, U+1160, U+3164, U+FFA0, U+17B4, U+17B5, U+180B..U+180F,
// U+2800, the variation selectors U+FE00..U+FE0F and U+E0100..U+E01EF).
bool is_invisible(std::int32_t code_point);

// Why `text`, a name, may not be one: "holds U+200B, an invisible or format
// character, at offset 7" for its first is_invisible character; nullopt
// when it has none. Invalid UTF-8 is not this function's concern.
std::optional<std::string> invisible_problem(std::string_view text);

// `text` with every invalid unit replaced by U+FFFD; valid text is returned
// unchanged.
std::string sanitize_utf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end
// inside a valid UTF-8 sequence.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// `text` made valid (sanitize_utf8) and at most `max_bytes` bytes long. Text
// that does not fit is cut at a code-point boundary and ends with the marker
// " [... N bytes cut]", N counting the bytes of `text` left out; the marker is
// included in `max_bytes`, which must be at least 64.
std::string bounded_text(std::string_view text, std::size_t max_bytes);

// `text` with everything that could act on a terminal or split a line
// rendered visibly, and nothing else changed: "\n", "\r" and "\t" for those
// three, "\xNN" for the other C0 controls, DEL and each byte of an invalid
// unit, "\u{NN}" for C1 controls, and "\u{NNNN}" for the characters that
// show nothing or reorder or break displayed text (is_invisible: U+200B,
// U+200E, U+2028, U+202E, U+2066, ...), so that two texts that print alike
// are alike. The result is valid UTF-8 without control
// characters; a backslash already in `text` is kept as it is.
std::string escape_controls(std::string_view text);

// escape_controls(text), cut like bounded_text: at most `max_bytes` bytes,
// ending with " [... N bytes cut]" (N counting bytes of `text`) when cut.
std::string bounded_escaped(std::string_view text, std::size_t max_bytes);

// The lines of `text`, split at "\n" and without it; a final "\n" does not
// start an empty line. The views point into `text`.
std::vector<std::string_view> split_lines(std::string_view text);

// Why `text` is not plain text of at most `max_bytes` bytes (valid UTF-8
// without control characters), as a phrase to follow the text's name:
// "is 2048 bytes long; the limit is 1024", "is not valid UTF-8 (byte 0xFF at
// offset 3)", "contains the control character U+001B at offset 0". The
// length is checked first, so a huge value is never scanned. nullopt when
// `text` is plain.
// With LineBreaks::allowed, tab, line feed and carriage return are allowed
// too (prose such as a run's goal, which the user wrote over several lines).
enum class LineBreaks { refused, allowed };
std::optional<std::string> plain_text_problem(std::string_view text, std::size_t max_bytes,
                                              LineBreaks breaks = LineBreaks::refused);

// `text` quoted for an error message: its first 40 bytes (at a code-point
// boundary) passed through escape_controls, then "..." if anything was left
// out, in double quotes.
std::string quoted_excerpt(std::string_view text);

// plain_text_problem for a named value, as a whole phrase: `name`, the
// value's quoted_excerpt and the problem, e.g. `field "actor" "\x1b[2J"
// contains the control character U+001B at offset 0`.
std::optional<std::string> named_text_problem(std::string_view name, std::string_view text,
                                              std::size_t max_bytes,
                                              LineBreaks breaks = LineBreaks::refused);

}  // namespace forktrial
