// Scenario specifications: "path.lua" or "path.lua::fn" inside the
// candidate's root for a Lua pack, "path.py" or "path.py::fn" for an
// activegraph pack (activegraph's own form, pack/executor.h). Pure parsing; the path's confinement
// (no absolute path, no "..") is checked when the file is looked up among the candidate's hashed
// files (pack::PackFiles::lua_file).
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "base/error.h"
#include "pack/executor.h"
#include "pack/pack_files.h"

namespace forktrial::pack {

struct ScenarioSpec {
  std::string path;               // relative to the candidate's root
  std::string function = "main";  // the global the file defines
};

// Errors name the spec and say what form is expected.
std::expected<ScenarioSpec, Status> parse_scenario_spec(std::string_view spec,
                                                        Executor executor = Executor::lua);

// The spec in either executor's form (before the candidate is known); the
// error is the Lua form's.
std::expected<ScenarioSpec, Status> parse_any_scenario_spec(std::string_view spec);

// Whether the spec names a file the candidate `files` can run with
// `executor` (`what` names it in the error): a .lua file of its code, or a
// .py file among its files; nothing when it does.
std::optional<Status> scenario_file_problem(const PackFiles& files, Executor executor,
                                            std::string_view spec, std::string_view what);

}  // namespace forktrial::pack
