// Bounds on event payloads, the JSON text every event carries. The store does
// not interpret payloads, but everything downstream parses them (the runtime
// projects them, `run export` re-serializes them), and parsers and
// serializers recurse: a payload nested tens of thousands of levels deep
// overflows the stack of whoever reads it. So nesting is bounded where
// payloads enter the store (Writer::append, the importers) and at every
// conversion (the runtime's JSON <-> Lua), by this one limit.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace forktrial::store {

// The deepest nesting of arrays and objects a payload may have. The payload
// object itself is level 1: {"a": {"b": []}} is 3 levels deep.
inline constexpr std::size_t kMaxPayloadDepth = 256;

// The nesting depth of the arrays and objects in JSON text, counted without
// parsing it (brackets inside strings are skipped). Malformed text gives a
// number too; this is a bound, not a validator.
std::size_t json_nesting_depth(std::string_view text);

// Why `payload` is too deep for the store ("nested N levels deep ...",
// to follow "payload is"), or nullopt.
std::optional<std::string> payload_depth_problem(std::string_view payload);

}  // namespace forktrial::store
