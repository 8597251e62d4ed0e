// The child's tail: outcome, counts, detail and warnings, encoded as one
// Cap'n Proto message (schema/trial.capnp) and written on fd 3. Only the
// child's own code writes fd 3, so nothing a candidate prints on stdout or
// stderr can pose as the tail; and even the tail is a signal only — the
// parent re-reads the store for every number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "sandbox/trial_types.h"

namespace forktrial::sandbox {

struct ChildTail {
  Outcome outcome = Outcome::crashed;
  Net net = Net::none;
  std::uint64_t events_appended = 0;
  std::uint64_t behavior_failures = 0;
  std::uint64_t last_seq = 0;
  std::string detail;
  std::vector<std::string> warnings;
  friend bool operator==(const ChildTail&, const ChildTail&) = default;
};

// The detail and the warnings hold text a candidate controls (its error
// messages), so the tail carries them bounded: the detail cut at
// kMaxTailDetailBytes, each warning at kMaxTailWarningBytes, each made valid
// UTF-8 and ending with " [... N bytes cut]" when cut (base/text.h
// bounded_text), and at most kMaxTailWarnings warnings, the last then saying
// how many more were cut. An encoded tail therefore always fits the parent's
// cap on fd 3 (SpawnRequest::tail_cap, 1 MiB).
inline constexpr std::size_t kMaxTailDetailBytes = 256 << 10;
inline constexpr std::size_t kMaxTailWarningBytes = 4 << 10;
inline constexpr std::size_t kMaxTailWarnings = 32;

std::string encode_tail(const ChildTail& tail);
// Decodes bytes read from fd 3; a truncated or malformed message is an error
// value naming what was wrong (the parent then reports `crashed`). Detail and
// warnings come back as valid UTF-8 (invalid bytes become U+FFFD), whoever
// wrote them.
std::expected<ChildTail, Status> decode_tail(std::string_view bytes);

}  // namespace forktrial::sandbox
