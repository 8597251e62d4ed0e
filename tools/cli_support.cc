#include "tools/cli_support.h"

namespace forktrial::tools {

std::string examples_footer(std::initializer_list<const char*> lines) {
  std::string out = "\nExamples:\n";
  for (const char* line : lines) {
    out += "  ";
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace forktrial::tools
