#include "tools/terminal.h"

#include "base/text.h"

namespace forktrial::tools {

std::string terminal_safe(std::string_view text) {
  return escape_controls(text);
}

std::vector<std::string> terminal_lines(std::string_view text) {
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(text)) lines.push_back(terminal_safe(line));
  return lines;
}

std::string terminal_text(std::string_view text) {
  const auto lines = terminal_lines(text);
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) out += (i == 0 ? "" : "\n") + lines[i];
  return out;
}

}  // namespace forktrial::tools
