// Behavior `where` filters, evaluated on an event's payload the way
// activegraph's evaluate_where does (activegraph/core/graph.py):
//
//   { "<dotted.path>" = <literal> }            the value at the path equals it
//   { "<dotted.path>" = { [op] = <value>, ... } }  every comparison holds
//
// with ops ">", "<", ">=", "<=", "==", "!=", "in", "not in". A path walks
// JSON objects key by key; a missing key, a non-object on the way, or a JSON
// null yields null. Ordering ops hold only for a non-null left side, and
// compare numbers with numbers and strings with strings (by code point);
// where Python would raise on other types, they do not hold here. "in"
// holds for membership in an array, a substring of a string, or a key of an
// object. All clauses must hold.
//
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace forktrial::runtime {

// Why `where` is not a filter (not an object, or an op outside the list);
// nullopt when it is.
std::optional<std::string> where_problem(const nlohmann::ordered_json& where);

// Whether every clause of `where` (checked by where_problem) holds on `payload`.
bool where_holds(const nlohmann::ordered_json& where, const nlohmann::ordered_json& payload);

}  // namespace forktrial::runtime
