// Pins and digests as text: "sha256:" + 64 lowercase hex (base/digest.h),
// checked by Digest::parse, Digest::describe_pin_problem, pack::check_pin_form
// and pack::compare_pin, and the wire's "bundle:<hex>" pack roots
// (schema/wire_codec.h). They must agree with each other, and whatever
// parses must print back as the same text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/digest.h"
#include "fuzz/check.h"
#include "pack/bundle_hash.h"
#include "schema/wire_codec.h"

using forktrial::Digest;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = Digest::parse(text);
  const auto problem = Digest::describe_pin_problem(text);
  FUZZ_CHECK(parsed.has_value() != problem.has_value());
  if (problem) FUZZ_CHECK(!problem->empty());
  const auto form = forktrial::pack::check_pin_form(text);
  FUZZ_CHECK(form.has_value() == problem.has_value());
  if (form) FUZZ_CHECK(form->kind == forktrial::pack::PinError::Kind::malformed_pin);

  // A fixed "actual" bundle hash: the input matches it or it does not.
  static const Digest actual = forktrial::Sha256::of("fuzz");
  const auto compared = forktrial::pack::compare_pin(text, actual, "/pack");
  if (parsed) {
    FUZZ_CHECK(parsed->str() == text);
    FUZZ_CHECK(std::string(Digest::kPrefix) + parsed->hex() == text);
    FUZZ_CHECK(Digest::parse(parsed->str()) == parsed);
    FUZZ_CHECK(compared.has_value() == (*parsed == actual));
    if (!compared) FUZZ_CHECK(compared.error().kind == forktrial::pack::PinError::Kind::mismatch);
  } else {
    FUZZ_CHECK(!compared);
    FUZZ_CHECK(compared.error().kind == forktrial::pack::PinError::Kind::malformed_pin);
  }

  if (const auto archive = forktrial::wire::archive_of_root(text)) {
    FUZZ_CHECK(forktrial::wire::bundle_root(*archive) == text);
  }
  return 0;
}
