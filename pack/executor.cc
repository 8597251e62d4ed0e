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

std::expected<Executor, Status> executor_of(const Manifest& manifest, const PackFiles& files) {
  if (manifest.runtime) return Executor::lua;  // the manifest validated its language
  const std::string where = "the pack at " + files.root().string();
  if (!files.contains("__init__.py")) {
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

}  // namespace forktrial::pack
