// Text TOML forbids, refused with its line and column before the TOML parser
// sees it: a control character (U+0000 to U+001F but tab, line feed and a
// carriage return before a line feed; U+007F) anywhere, and a character
// outside ASCII outside a string or a comment. toml++ 3.3 met such text with
// a failed assertion or code it marks unreachable (found by
// fuzz/manifest_fuzz and fuzz/batch_fuzz); pack/toml.h makes the parser
// itself safe, and this gives the author a precise message first. Every TOML
// read from untrusted text (a pack's manifest.toml, a batch file) is screened.
// A pure function; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace forktrial::pack {

// A Status (invalid_argument) whose message says what is there and that
// TOML does not allow it.
struct TomlTextProblem : Status {
  std::size_t line = 0;    // 1-based
  std::size_t column = 0;  // 1-based, in bytes

  TomlTextProblem(std::size_t at_line, std::size_t at_column, std::string why)
      : Status{ErrorCode::invalid_argument, std::move(why)}, line(at_line), column(at_column) {}
};

// The first such character in `text`, or nullopt when there is none.
std::optional<TomlTextProblem> toml_text_problem(std::string_view text);

}  // namespace forktrial::pack
