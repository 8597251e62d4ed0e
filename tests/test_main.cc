// The tests' main: Catch2's, after pointing the trial library at the child
// built with this tree (test executables do not sit beside it, and the library
// has no build-tree path compiled in). A run whose test cases passed but one
// of which called testing::skip() exits with kSkipExitCode, which ctest
// reports as skipped (tests/support/skip.h).
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <sstream>
#include <string>

#include "tests/support/skip.h"

int main(int argc, char* argv[]) {
  ::setenv("FORKTRIAL_CHILD", FORKTRIAL_CHILD_FOR_TESTS, 0);
  const int failed = Catch::Session().run(argc, argv);
  const std::string& reasons = forktrial::testing::skip_reasons();
  if (failed != 0 || reasons.empty()) return failed;
  std::istringstream lines(reasons);
  for (std::string line; std::getline(lines, line);) std::printf("SKIPPED: %s\n", line.c_str());
  std::fflush(stdout);
  return forktrial::testing::kSkipExitCode;
}
