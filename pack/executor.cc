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

std::optional<Executor> executor_named(std::string_view name) {
  for (const Executor executor : kExecutors) {
    if (executor_name(executor) == name) return executor;
  }
  return std::nullopt;
}

namespace {

bool has_init_py(const std::filesystem::path& root) {
  std::error_code ec;
  return std::filesystem::symlink_status(root / "__init__.py", ec).type() ==
         std::filesystem::file_type::regular;
}

// executor_of, with the root's __init__.py already looked for.
std::expected<Executor, Status> executor_with(const Manifest& manifest, bool init_py,
                                              const std::string& where) {
  if (manifest.runtime) return Executor::lua;  // the manifest validated its language
  if (!init_py) {
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

}  // namespace

std::expected<Executor, Status> executor_of(const Manifest& manifest,
                                            const std::filesystem::path& root) {
  return executor_with(manifest, has_init_py(root), "the pack at " + root.string());
}

bool is_activegraph_pack(const std::filesystem::path& root) {
  if (!has_init_py(root)) return false;
  auto manifest = load_manifest(root, RuntimeRequirement::optional);
  return manifest && executor_of(*manifest, root) == Executor::activegraph;
}

Executor executor_of_files(std::string_view manifest_text, bool init_py) {
  if (!init_py) return Executor::lua;
  auto manifest =
      parse_manifest(manifest_text, std::string(kManifestFile), RuntimeRequirement::optional);
  if (!manifest) return Executor::lua;
  return executor_with(*manifest, true, "the pack").value_or(Executor::lua);
}

bool manifest_declares_deterministic(std::string_view manifest_text) {
  auto manifest =
      parse_manifest(manifest_text, std::string(kManifestFile), RuntimeRequirement::optional);
  return manifest && declares_deterministic(*manifest);
}

}  // namespace forktrial::pack
