// The boundary between Runtime and its Lua bindings: the bindings reach the
// runtime only through RuntimeServices. Two things hold it, and a third makes
// sure the first applies to every source:
//   - runtime/runtime.h stops the compile of any source compiled with
//     FORKTRIAL_BELOW_RUNTIME, so such a source cannot see the Runtime class,
//     whether it includes the header directly, under another spelling or
//     through another header;
//   - runtime/runtime.h declares no friend, so no other code can reach
//     Runtime's private state even where the class is visible;
//   - the build compiles every source of the runtime library except
//     runtime.cc with FORKTRIAL_BELOW_RUNTIME (read from the build's
//     compile_commands.json, which records what the compiler was given).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/compile_commands.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using forktrial::testing::read_file;

// `source` with its comments, string literals and character literals blanked
// out (newlines kept), so that a word found in what is left is code. Raw
// string literals are not recognised; runtime.h has none.
std::string code_only(const std::string& source) {
  std::string out = source;
  enum class In { code, line_comment, block_comment, string, character } in = In::code;
  for (std::size_t i = 0; i < source.size(); ++i) {
    const char c = source[i];
    const char next = i + 1 < source.size() ? source[i + 1] : '\0';
    if (in == In::code) {
      const bool digit_separator = c == '\'' && i > 0 &&
                                   std::isxdigit(static_cast<unsigned char>(source[i - 1])) &&
                                   std::isxdigit(static_cast<unsigned char>(next));
      if (c == '/' && next == '/') in = In::line_comment;
      if (c == '/' && next == '*') {
        in = In::block_comment;
        out[i] = out[i + 1] = ' ';
        ++i;  // so that "/*/" does not close it
        continue;
      }
      if (c == '"') in = In::string;
      if (c == '\'' && !digit_separator) in = In::character;
      if (in != In::code) out[i] = ' ';
      continue;
    }
    if (c != '\n') out[i] = ' ';
    switch (in) {
      case In::line_comment:
        if (c == '\n') in = In::code;
        break;
      case In::block_comment:
        if (c == '*' && next == '/') {
          out[++i] = ' ';
          in = In::code;
        }
        break;
      case In::string:
      case In::character:
        if (c == '\\' && next != '\0') {
          if (next != '\n') out[i + 1] = ' ';
          ++i;
        } else if (c == (in == In::string ? '"' : '\'')) {
          in = In::code;
        }
        break;
      case In::code:
        break;
    }
  }
  return out;
}

// The lines (1-based) of `source` whose code declares a friend.
std::vector<int> friend_lines(const std::string& source) {
  const std::string code = code_only(source);
  static const std::regex word(R"(\bfriend\b)");
  std::vector<int> lines;
  int line = 1;
  std::size_t start = 0;
  while (start <= code.size()) {
    const std::size_t end = std::min(code.find('\n', start), code.size());
    if (std::regex_search(code.begin() + static_cast<std::ptrdiff_t>(start),
                          code.begin() + static_cast<std::ptrdiff_t>(end), word)) {
      lines.push_back(line);
    }
    start = end + 1;
    ++line;
  }
  return lines;
}

const fs::path kRuntimeDir = fs::path(FORKTRIAL_SOURCE_DIR) / "runtime";

}  // namespace

TEST_CASE("the friend check finds friends in code and not in comments or strings",
          "[runtime][layering]") {
  CHECK(friend_lines("class Runtime {\n  friend struct LuaApi;\n};\n") == std::vector<int>{2});
  CHECK(friend_lines("class A {\n friend\n  class B; };") == std::vector<int>{2});
  CHECK(friend_lines("// a friend of Runtime\n/* friend\n struct X; */\n").empty());
  CHECK(friend_lines("const char* s = \"friend \\\" friend\";\nchar c = '\"';\n").empty());
  CHECK(friend_lines("int befriended = 0; // friendship\n").empty());
  CHECK(friend_lines("int n = 1'000;\nfriend class C;\n") == std::vector<int>{2});
  CHECK(friend_lines("/*/ friend */ friend class C;\n") == std::vector<int>{1});
}

TEST_CASE("runtime.h declares no friend of Runtime", "[runtime][layering]") {
  const std::string header = read_file(kRuntimeDir / "runtime.h");
  REQUIRE(header.find("class Runtime final") != std::string::npos);
  // A friend would reach Runtime's private state around RuntimeServices.
  CHECK(friend_lines(header) == std::vector<int>{});
}

TEST_CASE("runtime.h refuses to compile in a source below Runtime", "[runtime][layering]") {
  const std::string code = code_only(read_file(kRuntimeDir / "runtime.h"));
  static const std::regex guard(R"(#\s*ifdef\s+FORKTRIAL_BELOW_RUNTIME\s*\n\s*#\s*error\b)");
  std::smatch found;
  REQUIRE(std::regex_search(code, found, guard));
  // Before any declaration the source could use.
  CHECK(static_cast<std::size_t>(found.position(0)) < code.find("namespace forktrial"));
}

TEST_CASE("every runtime source but runtime.cc is compiled below Runtime", "[runtime][layering]") {
  const fs::path commands_file = fs::path(FORKTRIAL_BUILD_DIR) / "compile_commands.json";
  static const std::regex below(R"((^|\s)-DFORKTRIAL_BELOW_RUNTIME(=\S*)?(\s|$))");
  std::map<std::string, bool> compiled_below;  // runtime/*.cc -> compiled with the definition
  const fs::path runtime_dir = fs::weakly_canonical(kRuntimeDir);
  for (const auto& [source, entry] : forktrial::testing::source_compiles(commands_file)) {
    const fs::path file = fs::weakly_canonical(source);
    if (file.parent_path() != runtime_dir) continue;
    std::string command;
    if (entry.contains("command")) {
      command = entry.at("command").get<std::string>();
    } else {
      for (const auto& argument : entry.at("arguments")) {
        command += argument.get<std::string>() + " ";
      }
    }
    compiled_below[file.filename().string()] = std::regex_search(command, below);
  }

  // The bindings are among the sources found, so the check cannot pass on
  // an empty list.
  for (const char* binding :
       {"lua_api.cc", "lua_pack.cc", "lua_globals.cc", "lua_graph.cc", "lua_rt.cc"}) {
    INFO(binding);
    CHECK(compiled_below.contains(binding));
  }
  REQUIRE(compiled_below.contains("runtime.cc"));
  CHECK_FALSE(compiled_below.at("runtime.cc"));
  for (const auto& [file, below_runtime] : compiled_below) {
    if (file == "runtime.cc") continue;
    INFO(file << " is compiled without FORKTRIAL_BELOW_RUNTIME (runtime/CMakeLists.txt)");
    CHECK(below_runtime);
  }
}
