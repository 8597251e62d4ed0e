#include "store/payload.h"

#include <algorithm>

namespace forktrial::store {

std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::optional<std::string> payload_depth_problem(std::string_view payload) {
  const std::size_t depth = json_nesting_depth(payload);
  if (depth <= kMaxPayloadDepth) return std::nullopt;
  return "nested " + std::to_string(depth) +
         " levels deep (arrays and objects); payloads may nest at most " +
         std::to_string(kMaxPayloadDepth) + " levels";
}

}  // namespace forktrial::store
