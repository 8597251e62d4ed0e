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

std::expected<ScenarioSpec, Status> parse_scenario_spec(std::string_view spec, Executor executor) {
  const bool lua = executor == Executor::lua;
  const std::string extension = lua ? ".lua" : ".py";
  const std::string language = lua ? "Lua" : "Python";
  ScenarioSpec out;
  const std::size_t separator = spec.find("::");
  out.path = std::string(spec.substr(0, separator));
  if (separator != std::string_view::npos) out.function = std::string(spec.substr(separator + 2));
  if (!out.path.ends_with(extension) || out.path.size() == extension.size()) {
    return failure(ErrorCode::invalid_argument,
                   "scenario \"" + std::string(spec) + "\" does not name a " + extension +
                       " file; write \"path" + extension + "\" or \"path" + extension + "::fn\"");
  }
  if (!is_identifier(out.function)) {
    return failure(ErrorCode::invalid_argument,
                   "scenario \"" + std::string(spec) + "\" names the function \"" + out.function +
                       "\", which is not a " + language + " identifier; write \"path" + extension +
                       "::fn\"");
  }
  return out;
}

std::expected<ScenarioSpec, Status> parse_any_scenario_spec(std::string_view spec) {
  auto lua = parse_scenario_spec(spec, Executor::lua);
  if (lua) return lua;
  auto python = parse_scenario_spec(spec, Executor::activegraph);
  return python ? python : lua;
}

std::optional<Status> scenario_file_problem(const PackFiles& files, Executor executor,
                                            std::string_view spec, std::string_view what) {
  auto parsed = parse_scenario_spec(spec, executor);
  if (!parsed) {
    return Status{parsed.error().code,
                  parsed.error().message + " (the candidate is " +
                      (executor == Executor::lua ? "a Lua pack" : "an activegraph Python pack") +
                      ")"};
  }
  if (executor == Executor::lua) {
    auto found = files.lua_file(parsed->path, what);
    if (!found) return found.error();
    return std::nullopt;
  }
  if (!is_confined_relative_path(parsed->path) || !files.contains(parsed->path)) {
    return Status{ErrorCode::invalid_argument, std::string(what) + " \"" + parsed->path +
                                                   "\" is not a file of the pack at " +
                                                   files.root().string()};
  }
  return std::nullopt;
}

}  // namespace forktrial::pack
