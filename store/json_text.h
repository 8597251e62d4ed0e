// JSON text handled as text: payloads are checked where they enter the store
// without being re-serialized, so their bytes (key order, spacing, integers
// of any width, number spellings) stay exactly as recorded, and they are
// re-emitted token by token the way Python's json.dumps writes them
// (docs/store-format.md, "Payload bytes").
//
// The grammar is RFC 8259, with strict UTF-8 (no overlong forms, surrogates
// or code points above U+10FFFF) and \u escapes that pair their surrogates.
// Python's extensions NaN, Infinity and -Infinity are recognised so that they
// can be named, and are refused (docs/decisions/0042-nan-infinity-refused.md).
//
// Pure functions; thread-safe. Nesting is bounded by kMaxPayloadDepth
// (store/payload.h) before anything recurses.
#pragma once

#include <cstddef>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"

namespace forktrial::store::json_text {

// Why `payload` cannot be stored as an event's payload, or nullopt. The
// message follows "payload is" / "payload ": "not valid JSON: ... at byte N",
// "a JSON array, not an object", "nested N levels deep ...", or, for Python's
// non-standard numbers, `value NaN at payload["score"] is not JSON ...`, or
// for a key repeated within one object, `holds the key ["k"] twice in
// payload["a"] ...` (Python's json.loads keeps the last, so the bytes would
// not mean to activegraph what they seem to).
std::optional<std::string> payload_problem(std::string_view payload);

// The members of the JSON object `text` (surrounding whitespace allowed), as
// (decoded key, exact bytes of the value) in input order; NaN, Infinity and
// -Infinity are accepted as values here. Fails with the reason when `text`
// is not a JSON object.
std::expected<std::vector<std::pair<std::string, std::string_view>>, Status> object_members(
    std::string_view text);

// The first NaN, Infinity or -Infinity in the JSON text `value`, as
// (path from `root`, the token), or nullopt. `value` must be valid JSON with
// those extensions (object_members accepted it).
std::optional<std::pair<std::string, std::string>> first_non_finite(std::string_view value,
                                                                    std::string_view root);

// Appends the JSON value `value` as Python's json.dumps(json.loads(value))
// writes it: ", " and ": " separators, keys in their order, strings
// re-escaped ASCII-only (\", \\, \n, \r, \t, \b, \f, other characters below
// U+0020 or from U+007F on as \u00XX lowercase, beyond the BMP as a
// surrogate pair), numbers and NaN/Infinity as their original text. Returns
// false (appending an unspecified prefix) when `value` is not valid JSON.
bool append_python_json(std::string& out, std::string_view value);

// Appends `text` as a JSON string the way Python's json.dumps writes it
// (ASCII only, as above). Invalid UTF-8 is written as U+FFFD.
void append_python_string(std::string& out, std::string_view text);

}  // namespace forktrial::store::json_text
