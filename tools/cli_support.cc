#include "tools/cli_support.h"

namespace forktrial::tools {

int exit_status_for(ErrorCode code) {
  return code == ErrorCode::invalid_argument ? kUsageError : 1;
}

std::string advice_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::resource_exhausted:
      return "free the resource named above (disk space, memory) or raise its limit, then run "
             "the command again";
    case ErrorCode::unavailable:
      return "it may be a passing condition; run the command again";
    case ErrorCode::internal:
      return "this is a bug or a broken host; report it with the message above";
    case ErrorCode::not_found:
    case ErrorCode::conflict:
    case ErrorCode::invalid_argument:
    case ErrorCode::failed_precondition:
    case ErrorCode::cancelled:
      break;
  }
  return "";
}

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
