// Behavior `where` filters, evaluated on an event's payload the way
// activegraph's evaluate_where does (activegraph/core/graph.py), with Python's
// comparison semantics:
//
//   { "<dotted.path>" = <literal> }            the value at the path equals it
//   { "<dotted.path>" = { [op] = <value>, ... } }  every comparison holds
//
// with ops ">", "<", ">=", "<=", "==", "!=", "in", "not in". A path walks
// JSON objects key by key; a missing key, a non-object on the way, or a JSON
// null yields null (Python's None). Equality is Python's: booleans are the
// integers 0 and 1 (true == 1 == 1.0), numbers compare by value, arrays item
// by item, objects by their key sets and values. Ordering ops are false for
// a null left side; otherwise they order numbers with numbers, strings with
// strings (by code point) and arrays with arrays (item by item), and raise,
// as Python does, for anything else. "in" is Python's: membership in an
// array (by equality), a substring of a string (a non-string left side
// raises), a key of an object (an array or object on the left raises); any
// other right side raises. All clauses must hold.
//
// Pure functions; thread-safe.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/error.h"

namespace forktrial::runtime {

// Why `where` is not a filter (not an object, or an op outside the list);
// nullopt when it is.
std::optional<std::string> where_problem(const nlohmann::ordered_json& where);

// Whether every clause of `where` (checked by where_problem) holds on
// `payload`; the error is the TypeError Python would raise
// ("TypeError: '>=' not supported between instances of 'str' and 'int'").
std::expected<bool, Status> where_holds(const nlohmann::ordered_json& where,
                                        const nlohmann::ordered_json& payload);

// Python's == on two JSON values (see above).
bool python_equal(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

}  // namespace forktrial::runtime
