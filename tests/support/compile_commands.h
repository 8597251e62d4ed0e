// Test support: the build's compile_commands.json read source by source. A
// unity compile (FORKTRIAL_UNITY, cmake/ForktrialPch.cmake) compiles several
// sources as one file CMake generates, which includes each by its absolute
// path; it is listed once for each source it compiles, with its own command.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace forktrial::testing {

struct SourceCompile {
  std::filesystem::path source;  // the source compiled, never a unity file
  nlohmann::json entry;          // its entry of compile_commands.json
};

std::vector<SourceCompile> source_compiles(const std::filesystem::path& compile_commands_json);

}  // namespace forktrial::testing
