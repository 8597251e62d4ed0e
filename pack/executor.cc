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

namespace {

bool has_init_py(const std::filesystem::path& root) {
  std::error_code ec;
  return std::filesystem::symlink_status(root / "__init__.py", ec).type() ==
         std::filesystem::file_type::regular;
}

}  // namespace

std::expected<Executor, Status> executor_of(const Manifest& manifest,
                                            const std::filesystem::path& root) {
  if (manifest.runtime) return Executor::lua;  // the manifest validated its language
  const std::string where = "the pack at " + root.string();
  if (!has_init_py(root)) {
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

bool is_activegraph_pack(const std::filesystem::path& root) {
  if (!has_init_py(root)) return false;
  auto manifest = load_manifest(root, RuntimeRequirement::optional);
  return manifest && executor_of(*manifest, root) == Executor::activegraph;
}

}  // namespace forktrial::pack
