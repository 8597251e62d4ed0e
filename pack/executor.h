// Which executor runs a pack (docs/pack-format.md, "Executors"): forktrial's
// Lua runtime for a forktrial-native pack, or activegraph's own trial child
// for an activegraph Python pack. Told from the manifest and the layout alone,
// before anything of the pack runs.
#pragma once

#include <expected>
#include <filesystem>
#include <string_view>

#include "base/error.h"
#include "pack/manifest.h"

namespace forktrial::pack {

enum class Executor {
  lua,          // [runtime] language = "lua": forktrial's confined Lua runtime
  activegraph,  // no [runtime], an __init__.py at the root, dependencies.activegraph
};

// "lua" or "activegraph": the names a worker's hello, a result and the
// command line use.
std::string_view executor_name(Executor executor);

// The executor of the pack at `root` whose manifest (parsed with [runtime]
// optional) is given. Refused (invalid_argument, saying what is missing)
// for a pack that is neither: a [runtime] table names the Lua runtime, and
// without one the pack must be an activegraph package (a regular file
// __init__.py at its root, and a dependencies.activegraph range).
std::expected<Executor, Status> executor_of(const Manifest& manifest,
                                            const std::filesystem::path& root);

// Whether the pack at `root` is an activegraph pack (executor_of). A
// directory without an __init__.py costs one stat and is not: the Lua path
// runs it, or says why it cannot. Otherwise its manifest is read; one that
// cannot be read is not an activegraph pack either.
bool is_activegraph_pack(const std::filesystem::path& root);

}  // namespace forktrial::pack
