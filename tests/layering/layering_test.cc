// The components' layering, held by the include paths the build gives each
// target (cmake/ForktrialComponent.cmake), checked against what the compiler
// is actually given: every compile command of the build's
// compile_commands.json is rerun on small probe files.
//   - A component's sources cannot include a header of a component after it
//     in FORKTRIAL_COMPONENTS: the include is not found.
//   - Outside a component (another component, its tests, the command line,
//     the benchmarks), none of its private headers is found; its own sources
//     and its own tests find all of its headers.
//   - A consumer that links one component alone compiles all of its public
//     headers.
// tests/layering/components.json, written by the build, names each
// component's public headers; every other header in its folder is private.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/compile_commands.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using forktrial::testing::CommandResult;
using forktrial::testing::read_file;
using forktrial::testing::run_command;
using forktrial::testing::TempDir;

// A compile command's words, as a POSIX shell splits them: CMake writes the
// "command" of compile_commands.json with shell quoting and escapes.
std::vector<std::string> shell_words(std::string_view command) {
  std::vector<std::string> words;
  std::optional<std::string> word;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (word) words.push_back(*word);
      word.reset();
      continue;
    }
    if (!word) word.emplace();
    if (c == '\\' && i + 1 < command.size()) {
      *word += command[++i];
    } else if (c == '\'') {
      const std::size_t end = command.find('\'', i + 1);
      REQUIRE(end != std::string_view::npos);
      *word += command.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      for (++i; i < command.size() && command[i] != '"'; ++i) {
        if (command[i] == '\\' && i + 1 < command.size() &&
            std::string_view("\"\\$`").find(command[i + 1]) != std::string_view::npos) {
          ++i;
        }
        *word += command[i];
      }
      REQUIRE(i < command.size());
    } else {
      *word += c;
    }
  }
  if (word) words.push_back(*word);
  return words;
}

// A compile command without its input, its output and its dependency file,
// so that it can compile a probe without touching the build tree.
struct Compiler {
  std::vector<std::string> argv;

  // Compiles `code` as a C++ source of the target the command came from;
  // `how` is -fsyntax-only (compile) or -E (preprocess, to stdout).
  CommandResult run(std::string_view code, std::string_view how = "-fsyntax-only") const {
    TempDir dir;
    const fs::path probe = dir.write("probe.cc", code);
    std::vector<std::string> command = argv;
    command.push_back(std::string(how));
    command.push_back(probe.string());
    return run_command(command);
  }
};

Compiler compiler_of(const nlohmann::json& entry) {
  std::vector<std::string> words;
  if (entry.contains("arguments")) {
    for (const auto& argument : entry.at("arguments")) words.push_back(argument.get<std::string>());
  } else {
    words = shell_words(entry.at("command").get<std::string>());
  }
  const std::string file = entry.at("file").get<std::string>();
  const fs::path directory = entry.at("directory").get<std::string>();
  Compiler compiler;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "-o" || word == "-MF" || word == "-MT" || word == "-MQ") {
      ++i;  // and its value
    } else if (word == "-c" || word == "-MD" || word == "-MMD") {
    } else if (i > 0 &&
               (directory / word).lexically_normal() == fs::path(file).lexically_normal()) {
    } else {
      compiler.argv.push_back(word);
    }
  }
  return compiler;
}

// A folder whose headers are included as "<name>/<header>": a component, or
// tools/, which has private headers only.
struct Folder {
  std::string name;
  std::set<std::string> public_headers;
  std::set<std::string> private_headers;
  fs::path sources;
  std::optional<fs::path> consumer;  // a source that links this component alone
};

std::vector<Folder> folders() {
  const auto manifest = nlohmann::json::parse(read_file(FORKTRIAL_COMPONENTS_MANIFEST));
  std::vector<Folder> result;
  for (const auto& entry : manifest.at("folders")) {
    Folder folder;
    folder.name = entry.at("name").get<std::string>();
    folder.sources = entry.at("sources").get<std::string>();
    if (entry.contains("consumer")) folder.consumer = entry.at("consumer").get<std::string>();
    for (const auto& header : entry.at("public")) {
      folder.public_headers.insert(header.get<std::string>());
    }
    for (const auto& file : fs::directory_iterator(folder.sources)) {
      const std::string header = file.path().filename().string();
      if (file.path().extension() == ".h" && !folder.public_headers.contains(header)) {
        folder.private_headers.insert(header);
      }
    }
    result.push_back(std::move(folder));
  }
  return result;
}

const Folder& folder_named(const std::vector<Folder>& all, std::string_view name) {
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const Folder& f) { return f.name == name; });
  REQUIRE(found != all.end());
  return *found;
}

std::vector<forktrial::testing::SourceCompile> compile_commands() {
  return forktrial::testing::source_compiles(FORKTRIAL_COMPILE_COMMANDS);
}

// The compile command of `file` (one of them, if several targets build it).
Compiler compiler_for(const fs::path& file) {
  for (const auto& compile : compile_commands()) {
    if (compile.source == file.lexically_normal()) return compiler_of(compile.entry);
  }
  FAIL("no compile command for " << file);
  return {};
}

bool is_within(const fs::path& file, const fs::path& folder) {
  const fs::path relative = file.lexically_normal().lexically_relative(folder.lexically_normal());
  return !relative.empty() && *relative.begin() != "..";
}

// What a compile command is for: the sources or the tests of a folder, or
// neither (the tests' support code, the consumer probes, the benchmarks).
struct Role {
  std::string folder;  // empty: no folder's
  bool tests = false;
};

Role role_of(const fs::path& file, const std::vector<Folder>& all) {
  const fs::path tests = fs::path(FORKTRIAL_SOURCE_DIR) / "tests";
  for (const Folder& folder : all) {
    if (file.lexically_normal().parent_path() == folder.sources.lexically_normal()) {
      return {folder.name, false};
    }
    if (is_within(file, tests / folder.name)) return {folder.name, true};
  }
  return {};
}

bool not_found(const CommandResult& result, std::string_view header) {
  // gcc says "No such file or directory", clang "file not found".
  return result.exit_code != 0 && result.err.find(std::string(header)) != std::string::npos &&
         (result.err.find("No such file or directory") != std::string::npos ||
          result.err.find("file not found") != std::string::npos);
}

// A probe that prints `missing "<header>"` for each header of `visible` the
// compiler does not find and `visible "<header>"` for each of `hidden` it
// finds; preprocessed (-E), the output holds only the lines that break the
// expectation.
std::string visibility_probe(const std::set<std::string>& visible,
                             const std::set<std::string>& hidden) {
  std::string code;
  for (const std::string& header : visible) {
    code += "#if !__has_include(\"" + header + "\")\nforktrial_layering_missing \"" + header +
            "\"\n#endif\n";
  }
  for (const std::string& header : hidden) {
    code += "#if __has_include(\"" + header + "\")\nforktrial_layering_visible \"" + header +
            "\"\n#endif\n";
  }
  return code;
}

std::vector<std::string> broken_expectations(const std::string& preprocessed) {
  std::vector<std::string> broken;
  for (const std::string& line : forktrial::testing::lines_of(preprocessed)) {
    if (line.starts_with("forktrial_layering_")) broken.push_back(line.substr(19));
  }
  return broken;
}

}  // namespace

TEST_CASE("compile commands are split into words as a shell would", "[layering]") {
  CHECK(shell_words("c++  -DX=\\\"a\\ b\\\" -I'/p q' \"-DY=\\\"z\\\"\" -c f.cc") ==
        std::vector<std::string>{"c++", "-DX=\"a b\"", "-I/p q", "-DY=\"z\"", "-c", "f.cc"});
  CHECK(shell_words("") == std::vector<std::string>{});
  CHECK(shell_words("a '' b") == std::vector<std::string>{"a", "", "b"});
}

TEST_CASE("a store source cannot include the runtime's header", "[layering]") {
  const Compiler store = compiler_for(fs::path(FORKTRIAL_SOURCE_DIR) / "store/event_store.cc");
  const CommandResult upward = store.run("#include \"runtime/runtime.h\"\n");
  INFO(upward.err);
  CHECK(not_found(upward, "runtime/runtime.h"));

  // The same command compiles the store's own headers, private ones too, and
  // those of the base it links.
  const CommandResult own = store.run(
      "#include \"store/environment.h\"\n#include \"store/txn_gate.h\"\n#include "
      "\"base/text.h\"\n");
  INFO(own.err);
  CHECK(own.exit_code == 0);
}

TEST_CASE("a consumer of the store compiles its public headers and cannot include its private ones",
          "[layering]") {
  const auto all = folders();
  const Folder& store = folder_named(all, "store");
  REQUIRE(store.consumer);
  const Compiler consumer = compiler_for(*store.consumer);

  for (const char* header : {"environment.h", "txn_gate.h", "codec.h"}) {
    const std::string name = std::string("store/") + header;
    const CommandResult result = consumer.run("#include \"" + name + "\"\n");
    INFO(name << ": " << result.err);
    CHECK(store.private_headers.contains(header));
    CHECK(not_found(result, name));
  }
  std::string code;
  for (const std::string& header : store.public_headers) {
    code += "#include \"store/" + header + "\"\n";
  }
  CHECK(store.public_headers.contains("event_store.h"));
  const CommandResult result = consumer.run(code);
  INFO(result.err);
  CHECK(result.exit_code == 0);
}

TEST_CASE("every component's public headers compile in a consumer that links it alone",
          "[layering]") {
  for (const Folder& component : folders()) {
    if (!component.consumer) continue;
    INFO(component.name);
    const CommandResult result =
        compiler_for(*component.consumer).run(read_file(*component.consumer));
    INFO(result.err);
    CHECK(result.exit_code == 0);
  }
}

TEST_CASE("every compile command sees the headers its layer allows and no others", "[layering]") {
  const auto all = folders();
  // Component names in layering order; tools/ is not a component.
  std::vector<std::string> components;
  for (const Folder& folder : all) {
    if (folder.consumer) components.push_back(folder.name);
  }
  REQUIRE(components.size() >= 7);

  // One probe per distinct command and role: many sources share a command.
  std::map<std::pair<std::string, std::string>, std::pair<Compiler, fs::path>> distinct;
  for (const auto& [file, entry] : compile_commands()) {
    // The fuzz targets (built beside the tests in the sanitizer tree) see the
    // internals they name in fuzz/CMakeLists.txt (INTERNALS), as tests do.
    if (is_within(file, fs::path(FORKTRIAL_SOURCE_DIR) / "fuzz")) continue;
    const Role role = role_of(file, all);
    const Compiler compiler = compiler_of(entry);
    std::string key;
    for (const std::string& word : compiler.argv) key += word + '\n';
    distinct.try_emplace({role.folder + (role.tests ? "/tests" : ""), key}, compiler, file);
  }

  std::set<std::string> roles_seen;
  for (const auto& [key, command] : distinct) {
    const auto& [compiler, file] = command;
    const Role role = role_of(file, all);
    roles_seen.insert(key.first);
    std::set<std::string> visible;
    std::set<std::string> hidden;
    const auto own_position = std::find(components.begin(), components.end(), role.folder);
    for (const Folder& folder : all) {
      const bool own = folder.name == role.folder;
      for (const std::string& header : folder.private_headers) {
        (own ? visible : hidden).insert(folder.name + "/" + header);
      }
      if (own) {
        for (const std::string& header : folder.public_headers) {
          visible.insert(folder.name + "/" + header);
        }
      }
      // Above the component whose source this is.
      const auto position = std::find(components.begin(), components.end(), folder.name);
      if (!role.tests && own_position != components.end() && position > own_position &&
          position != components.end()) {
        for (const std::string& header : folder.public_headers) {
          hidden.insert(folder.name + "/" + header);
        }
      }
    }
    const CommandResult result = compiler.run(visibility_probe(visible, hidden), "-E");
    INFO("the command of " << file.string() << ": " << result.err);
    REQUIRE(result.exit_code == 0);
    CHECK(broken_expectations(result.out) == std::vector<std::string>{});
  }

  // The check covered the sources and the tests of every component.
  for (const std::string& component : components) {
    CHECK(roles_seen.contains(component));
    if (component != "schema") CHECK(roles_seen.contains(component + "/tests"));
  }
  CHECK(roles_seen.contains("tools"));
}
