// Test support: what a directory holds.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace forktrial::testing {

// The names of the entries of `dir`, sorted.
inline std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace forktrial::testing
