#include "base/digest.h"

#include <catch2/catch.hpp>

using forktrial::Digest;
using forktrial::Sha256;

TEST_CASE("sha256 of known inputs matches the published vectors", "[base]") {
  CHECK(Sha256::of("").str() ==
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::of("abc").hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("streaming updates equal a one-shot digest", "[base]") {
  Sha256 hasher;
  hasher.update("a");
  hasher.update("");
  hasher.update("bc");
  CHECK(hasher.finish() == Sha256::of("abc"));
}

TEST_CASE("digest text round-trips and malformed pins are described", "[base]") {
  const std::string text =
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  auto parsed = Digest::parse(text);
  REQUIRE(parsed);
  CHECK(parsed->str() == text);
  CHECK(Digest::describe_pin_problem(text) == std::nullopt);

  CHECK(*Digest::describe_pin_problem("ba7816bf") == "it must start with \"sha256:\"");
  CHECK(*Digest::describe_pin_problem("sha256:abc") ==
        "it must have exactly 64 hex digits after \"sha256:\", found 3");
  CHECK(*Digest::describe_pin_problem(
            "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD") ==
        "hex digits must be lowercase");
  CHECK(*Digest::describe_pin_problem(
            "sha256:zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") ==
        "it contains a character that is not a hex digit");
  CHECK_FALSE(Digest::parse("sha256:"));
}
