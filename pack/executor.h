// Which executor runs a pack (docs/pack-format.md, "Executors"): forktrial's
// Lua runtime for a forktrial-native pack, or activegraph's own trial child
// for an activegraph Python pack. Told from the manifest and the layout alone,
// before anything of the pack runs.
#pragma once

#include <array>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "pack/manifest.h"

namespace forktrial::pack {

enum class Executor {
  lua,          // [runtime] language = "lua": forktrial's confined Lua runtime
  activegraph,  // no [runtime], an __init__.py at the root, dependencies.activegraph
};

inline constexpr std::size_t kExecutorCount = 2;
inline constexpr std::array<Executor, kExecutorCount> kExecutors = {Executor::lua,
                                                                    Executor::activegraph};

// "lua" or "activegraph": the names a worker's hello, a result and the
// command line use.
std::string_view executor_name(Executor executor);
// The executor of that name; none for a name forktrial does not have.
std::optional<Executor> executor_named(std::string_view name);

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

// The same rule for a pack known by its manifest's text and whether a regular
// file __init__.py is at its root (a pack archive, before it is extracted):
// activegraph when the text parses with [runtime] optional and executor_of
// says so, Lua otherwise (the Lua path says what is wrong with the rest).
Executor executor_of_files(std::string_view manifest_text, bool init_py);
// Whether `manifest_text` validates (as a pack without [runtime] may) and
// declares the pack deterministic.
bool manifest_declares_deterministic(std::string_view manifest_text);

}  // namespace forktrial::pack
