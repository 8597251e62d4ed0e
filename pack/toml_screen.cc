#include "pack/toml_screen.h"

#include <cstdio>

namespace forktrial::pack {

std::optional<TomlTextProblem> toml_text_problem(std::string_view text) {
  // Where the scanner is: strings are skipped by their delimiters (a basic
  // string's escapes included), comments to the end of the line.
  enum class In { code, comment, basic, literal, multi_basic, multi_literal } in = In::code;
  std::size_t line = 1;
  std::size_t line_start = 0;
  auto problem = [&](std::size_t at, const char* what) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[at]));
    return TomlTextProblem{line, at - line_start + 1,
                           std::string("byte ") + byte + " " + what + "; TOML does not allow it"};
  };
  // A UTF-8 byte order mark may open the document.
  const std::size_t first = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  for (std::size_t i = first; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      if (in == In::basic || in == In::literal) in = In::code;  // toml++ reports the string
      if (in == In::comment) in = In::code;
      ++line;
      line_start = i + 1;
      continue;
    }
    if ((c < 0x20 && c != '\t' && !(c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) ||
        c == 0x7F) {
      return problem(i, "is a control character");
    }
    const bool triple = text.substr(i, 3) == (c == '"' ? "\"\"\"" : "'''");
    switch (in) {
      case In::code:
        if (c >= 0x80) return problem(i, "is not ASCII, outside a string or a comment");
        if (c == '#') in = In::comment;
        if (c == '"' || c == '\'') {
          in = triple ? (c == '"' ? In::multi_basic : In::multi_literal)
                      : (c == '"' ? In::basic : In::literal);
          if (triple) i += 2;
        }
        break;
      case In::comment:
        break;
      case In::basic:
        if (c == '\\') {
          if (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (c == '"') {
          in = In::code;
        }
        break;
      case In::literal:
        if (c == '\'') in = In::code;
        break;
      case In::multi_basic:
        if (c == '\\') {
          if (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (triple && c == '"') {
          // Up to two more quotes may close the string as its content.
          i += 2;
          while (i + 1 < text.size() && text[i + 1] == '"') ++i;
          in = In::code;
        }
        break;
      case In::multi_literal:
        if (triple && c == '\'') {
          i += 2;
          while (i + 1 < text.size() && text[i + 1] == '\'') ++i;
          in = In::code;
        }
        break;
    }
  }
  return std::nullopt;
}

}  // namespace forktrial::pack
