// Test support: reading what tests/sandbox/child_probe.cc reports.
#pragma once

#include <map>
#include <sstream>
#include <string>

namespace forktrial::testing {

// The probe's descriptor listing, "<fd> <target>" lines, as fd -> target.
inline std::map<int, std::string> parse_descriptor_listing(const std::string& listing) {
  std::map<int, std::string> held;
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    held[std::stoi(line.substr(0, space))] = line.substr(space + 1);
  }
  return held;
}

// The descriptor numbers of a listing.
inline std::string descriptor_numbers(const std::map<int, std::string>& held) {
  std::string numbers;
  for (const auto& [fd, target] : held)
    numbers += (numbers.empty() ? "" : " ") + std::to_string(fd);
  return numbers;
}

}  // namespace forktrial::testing
