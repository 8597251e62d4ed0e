// Test support: a test case that cannot run here says so and is reported as
// skipped, never as passed.
//
// Each Catch2 test case runs as a ctest test of its own (catch_discover_tests),
// so the executable's exit status is that test's: skip() records why, the
// test case returns, and the tests' main exits with kSkipExitCode, which
// tests/CMakeLists.txt names as every test's SKIP_RETURN_CODE. The reason is
// printed as "SKIPPED: <why>", which scripts/test lists at the end of a pass.
#pragma once

#include <string>

namespace forktrial::testing {

inline constexpr int kSkipExitCode = 77;

// Marks the running test case as skipped because of `why`; the caller returns
// right after, before asserting anything. A skipped case that also failed is
// a failure.
void skip(const std::string& why);

// What skip() was told in this process, one reason a line ("" if nothing).
const std::string& skip_reasons();

}  // namespace forktrial::testing
