// What the TOML parser (toml++ 3.3) must never be shown. Two kinds of text
// that TOML forbids anyway reach code toml++ marks unreachable or assumes
// impossible, which in a release build is undefined behaviour and in a
// debug build an abort (found by fuzz/manifest_fuzz and fuzz/batch_fuzz):
//   - a control character (U+0000 to U+001F but tab, line feed and a
//     carriage return before a line feed; U+007F) anywhere, e.g. NUL in a
//     table header;
//   - a character outside ASCII outside a string or a comment, e.g. "×" where
//     a key or a value should start.
// Every TOML read from untrusted text (a pack's manifest.toml, a batch file)
// is screened first. A pure function; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace forktrial::pack {

struct TomlTextProblem {
  std::size_t line = 0;    // 1-based
  std::size_t column = 0;  // 1-based, in bytes
  std::string message;     // what is there and that TOML does not allow it
};

// The first such character in `text`, or nullopt when there is none.
std::optional<TomlTextProblem> toml_text_problem(std::string_view text);

}  // namespace forktrial::pack
