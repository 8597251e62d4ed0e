// The coordinator and the worker read the world only through base/world.h:
// no source of coordinator/ or worker/ reads a clock, a random device or the
// free space of a disk by itself, so that what a daemon runs is what a
// virtual-time test or a simulation runs (one seam for the world).
// Comments and string literals are left out of the search; a type
// (std::chrono::steady_clock::time_point) is not a reading.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;

// `code` with its comments and string and character literals blanked out
// (line breaks kept, so that lines keep their numbers).
std::string code_only(std::string_view code) {
  std::string out(code);
  enum { plain, line_comment, block_comment, string, character } state = plain;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = code[i];
    const char next = i + 1 < code.size() ? code[i + 1] : '\0';
    switch (state) {
      case plain:
        if (c == '/' && next == '/') state = line_comment;
        if (c == '/' && next == '*') state = block_comment;
        if (c == '"') state = string;
        if (c == '\'') state = character;
        if (state != plain) out[i] = ' ';
        continue;
      case line_comment:
        if (c == '\n') state = plain;
        break;
      case block_comment:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          state = plain;
          continue;
        }
        break;
      case string:
      case character:
        if (c == '\\' && next != '\0') {
          out[i] = out[i + 1] = ' ';
          ++i;
          continue;
        }
        if (c == (state == string ? '"' : '\'')) state = plain;
        break;
    }
    if (out[i] != '\n') out[i] = ' ';
  }
  return out;
}

// What reads the world by itself.
constexpr std::string_view kReadings[] = {
    "steady_clock::now", "system_clock::now", "high_resolution_clock::now",
    "random_device",     "statvfs",           "clock_gettime",
    "gettimeofday",      "time(nullptr)",     "time(NULL)",
    "std::rand(",        "getrandom",         "utc_clock::now",
};

std::vector<std::string> readings_in(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string code = code_only(text.str());
  std::vector<std::string> found;
  std::size_t line = 1, start = 0;
  for (std::size_t end = 0; end <= code.size(); ++end) {
    if (end < code.size() && code[end] != '\n') continue;
    const std::string_view text_line(code.data() + start, end - start);
    for (const std::string_view reading : kReadings) {
      if (text_line.find(reading) != std::string_view::npos) {
        found.push_back(file.string() + ":" + std::to_string(line) + ": " + std::string(reading));
      }
    }
    ++line;
    start = end + 1;
  }
  return found;
}

std::vector<std::string> readings_under(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
    for (auto& reading : readings_in(entry.path())) found.push_back(std::move(reading));
  }
  std::sort(found.begin(), found.end());
  return found;
}

TEST_CASE("the search sees through comments and literals, and finds a reading",
          "[layering][world]") {
  const std::string code =
      "// std::chrono::steady_clock::now() in a comment\n"
      "const char* s = \"random_device \\\" statvfs\";\n"
      "/* system_clock::now()\n   */ auto t = std::chrono::steady_clock::time_point{};\n"
      "auto n = std::chrono::system_clock::now();\n";
  const std::string plain = code_only(code);
  CHECK(std::count(plain.begin(), plain.end(), '\n') == 5);
  CHECK(plain.find("steady_clock::now") == std::string::npos);
  CHECK(plain.find("random_device") == std::string::npos);
  CHECK(plain.find("statvfs") == std::string::npos);
  CHECK(plain.find("steady_clock::time_point") != std::string::npos);
  CHECK(plain.find("system_clock::now") == plain.rfind("system_clock::now"));
  CHECK(plain.find("system_clock::now") != std::string::npos);
}

TEST_CASE(
    "the coordinator and the worker read clocks, randomness and disk space only "
    "through the World seam",
    "[layering][world]") {
  for (const char* component : {"coordinator", "worker"}) {
    INFO(component);
    const fs::path dir = fs::path(FORKTRIAL_SOURCE_DIR) / component;
    REQUIRE(fs::is_directory(dir));
    const std::vector<std::string> found = readings_under(dir);
    std::string listed;
    for (const std::string& reading : found) listed += "\n  " + reading;
    INFO("read the world through base/world.h (a World&) instead:" + listed);
    CHECK(found.empty());
  }
}

}  // namespace
