// Reading a file that must lie inside a pack's root: module files for
// `require`, the manifest's entry file, and scenario files.
//
// The path must be relative and plain (no "..", ".", empty components or
// backslashes). It is opened component by component with O_NOFOLLOW from a
// descriptor of the root, so a symlink anywhere below the root is refused even
// if it is swapped in while the path is being checked. The root itself is the
// caller's choice and may be reached through symlinks.
//
// Thread-safe (no shared state).
#pragma once

#include <expected>
#include <filesystem>
#include <string>
#include <string_view>

namespace forktrial::runtime {

// Returns the file's bytes, or a complete sentence saying why not, naming the
// path as `what` (e.g. "scenario path", "module 'util'") and, for refusals,
// the offending component.
std::expected<std::string, std::string> read_confined_file(const std::filesystem::path& root,
                                                           std::string_view relative,
                                                           std::string_view what);

}  // namespace forktrial::runtime
