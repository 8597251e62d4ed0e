// The tests' main: Catch2's, after pointing the trial library at the child
// built with this tree (test executables do not sit beside it, and the library
// has no build-tree path compiled in).
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>

#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  ::setenv("FORKTRIAL_CHILD", FORKTRIAL_CHILD_FOR_TESTS, 0);
  return Catch::Session().run(argc, argv);
}
