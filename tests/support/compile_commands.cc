#include "tests/support/compile_commands.h"

#include <regex>
#include <string>

#include "tests/support/temp_dir.h"

namespace forktrial::testing {

namespace fs = std::filesystem;

namespace {

// CMake names its unity sources unity_<batch>_cxx.cxx (unity_<batch>_c.c).
bool is_unity_source(const fs::path& file) {
  static const std::regex name(R"(unity_\d+_(cxx\.cxx|c\.c))");
  return std::regex_match(file.filename().string(), name);
}

std::vector<fs::path> included_sources(const fs::path& unity) {
  static const std::regex include(R"re(#include\s+"([^"]+)")re");
  std::vector<fs::path> sources;
  const std::string text = read_file(unity);
  for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
    sources.push_back(fs::path((*it)[1].str()).lexically_normal());
  }
  return sources;
}

}  // namespace

std::vector<SourceCompile> source_compiles(const fs::path& compile_commands_json) {
  const auto commands = nlohmann::json::parse(read_file(compile_commands_json));
  std::vector<SourceCompile> compiles;
  for (const auto& entry : commands) {
    fs::path file = entry.at("file").get<std::string>();
    if (file.is_relative()) file = fs::path(entry.at("directory").get<std::string>()) / file;
    if (is_unity_source(file)) {
      for (const fs::path& source : included_sources(file)) compiles.push_back({source, entry});
    } else {
      compiles.push_back({file.lexically_normal(), entry});
    }
  }
  return compiles;
}

}  // namespace forktrial::testing
