#include "tests/support/skip.h"

#include <catch2/catch.hpp>

namespace forktrial::testing {
namespace {

std::string& reasons() {
  static std::string text;
  return text;
}

}  // namespace

void skip(const std::string& why) {
  WARN("skipped: " << why);
  reasons() += why + "\n";
}

const std::string& skip_reasons() { return reasons(); }

}  // namespace forktrial::testing
