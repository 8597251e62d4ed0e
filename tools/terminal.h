// How the `forktrial` command writes text a hostile candidate or an imported
// run may have chosen (labels, event types and payloads, error messages,
// trial details) without letting it act on the user's terminal or break the
// output's shape.
//
// Every text output of every subcommand, error messages included, goes
// through terminal_safe (one line), terminal_lines or terminal_text (several
// lines); JSON output goes through json_text. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial::tools {

// `text` with control characters (C0, DEL, C1), invalid UTF-8 and the
// characters that reorder or break displayed text rendered visibly (\x1b,
// \n, \u{9b}, \u{202e}, ...; base/text.h escape_controls): one line that
// writes only what it shows.
std::string terminal_safe(std::string_view text);

// The lines of `text` (split at "\n"), each passed through terminal_safe: a
// multi-line message keeps its line structure, and no line can hide or
// rewrite another. A trailing newline does not make an empty last line.
std::vector<std::string> terminal_lines(std::string_view text);
// terminal_lines joined by "\n": multi-line text, safe to print as it is.
std::string terminal_text(std::string_view text);

// `value` as JSON text (compact, or indented by `indent` spaces), with any
// string that is not valid UTF-8 written with U+FFFD: JSON output never fails
// on the bytes it carries.
template <typename Json>
std::string json_text(const Json& value, int indent = -1) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace forktrial::tools
