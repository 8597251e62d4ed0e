#include "pack/executor.h"

#include <string>

namespace forktrial::pack {

std::string_view executor_name(Executor executor) {
  switch (executor) {
    case Executor::lua:
      return "lua";
    case Executor::activegraph:
      return "activegraph";
  }
  return "unknown";
}

std::expected<Executor, Status> executor_of(const Manifest& manifest,
                                            const std::filesystem::path& root) {
  if (manifest.runtime) return Executor::lua;  // the manifest validated its language
  const std::string where = "the pack at " + root.string();
  std::error_code ec;
  if (std::filesystem::symlink_status(root / "__init__.py", ec).type() !=
      std::filesystem::file_type::regular) {
    return failure(ErrorCode::invalid_argument,
                   where +
                       " has no [runtime] table and no __init__.py at its root: a "
                       "forktrial pack names its Lua entry in [runtime], and an activegraph "
                       "pack is a Python package");
  }
  if (manifest.dependencies.runtime_range_key != "activegraph") {
    return failure(ErrorCode::invalid_argument,
                   where +
                       " is a Python package without dependencies.activegraph: an "
                       "activegraph pack names the activegraph versions it runs under");
  }
  return Executor::activegraph;
}

std::optional<Executor> executor_at(const std::filesystem::path& root) {
  auto manifest = load_manifest(root, RuntimeRequirement::optional);
  if (!manifest) return std::nullopt;
  auto executor = executor_of(*manifest, root);
  if (!executor) return std::nullopt;
  return *executor;
}

}  // namespace forktrial::pack
