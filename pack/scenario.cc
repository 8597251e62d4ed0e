#include "pack/scenario.h"

namespace forktrial::pack {
namespace {

bool is_identifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (const char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::expected<ScenarioSpec, Status> parse_scenario_spec(std::string_view spec) {
  ScenarioSpec out;
  const std::size_t separator = spec.find("::");
  out.path = std::string(spec.substr(0, separator));
  if (separator != std::string_view::npos) out.function = std::string(spec.substr(separator + 2));
  if (!out.path.ends_with(".lua") || out.path.size() == 4) {
    return failure(ErrorCode::invalid_argument,
                   "scenario \"" + std::string(spec) +
                       "\" does not name a .lua file; write \"path.lua\" or \"path.lua::fn\"");
  }
  if (!is_identifier(out.function)) {
    return failure(ErrorCode::invalid_argument,
                   "scenario \"" + std::string(spec) + "\" names the function \"" + out.function +
                       "\", which is not a Lua identifier; write \"path.lua::fn\"");
  }
  return out;
}

}  // namespace forktrial::pack
