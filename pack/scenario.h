// Scenario specifications: "path.lua" or "path.lua::fn" inside the
// candidate's root. Pure parsing; the path's confinement (no absolute path,
// no "..") is checked when the file is looked up among the candidate's hashed
// files (pack::PackFiles::lua_file).
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "base/error.h"

namespace forktrial::pack {

struct ScenarioSpec {
  std::string path;               // relative to the candidate's root
  std::string function = "main";  // the global the file defines
};

// Errors name the spec and say what form is expected.
std::expected<ScenarioSpec, Status> parse_scenario_spec(std::string_view spec);

}  // namespace forktrial::pack
