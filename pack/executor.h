// Which executor runs a pack (docs/pack-format.md, "Executors"): forktrial's
// Lua runtime for a forktrial-native pack, or activegraph's own trial child
// for an activegraph Python pack. Told from the manifest and the layout alone,
// before anything of the pack runs.
#pragma once

#include <expected>
#include <string_view>

#include "base/error.h"
#include "pack/manifest.h"
#include "pack/pack_files.h"

namespace forktrial::pack {

enum class Executor {
  lua,          // [runtime] language = "lua": forktrial's confined Lua runtime
  activegraph,  // no [runtime], an __init__.py at the root, dependencies.activegraph
};

// "lua" or "activegraph": the names a worker's hello, a result and the
// command line use.
std::string_view executor_name(Executor executor);

// The executor of the pack whose manifest (parsed with [runtime] optional)
// and files are given. Refused (invalid_argument, saying what is missing)
// for a pack that is neither: a [runtime] table names the Lua runtime, and
// without one the pack must be an activegraph package (an __init__.py at its
// root, and a dependencies.activegraph range).
std::expected<Executor, Status> executor_of(const Manifest& manifest, const PackFiles& files);

}  // namespace forktrial::pack
