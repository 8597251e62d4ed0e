// `where` filters with Python's comparison semantics, as activegraph's
// evaluate_where has them: each expectation is what Python 3 evaluates.
#include "runtime/where.h"

#include <catch2/catch.hpp>

using forktrial::runtime::python_equal;
using forktrial::runtime::where_holds;
using json = nlohmann::ordered_json;

namespace {

bool holds(const char* where, const char* payload) {
  const auto result = where_holds(json::parse(where), json::parse(payload));
  INFO((result ? "" : result.error().message));
  REQUIRE(result);
  return *result;
}

std::string raised(const char* where, const char* payload) {
  const auto result = where_holds(json::parse(where), json::parse(payload));
  REQUIRE_FALSE(result);
  return result.error().message;
}

}  // namespace

TEST_CASE("where equality is Python's: booleans are integers, numbers compare by value",
          "[runtime][where]") {
  CHECK(holds(R"({"x": 1})", R"({"x": true})"));       // True == 1
  CHECK(holds(R"({"x": 0})", R"({"x": false})"));      // False == 0
  CHECK(holds(R"({"x": 1.0})", R"({"x": 1})"));        // 1 == 1.0
  CHECK_FALSE(holds(R"({"x": "1"})", R"({"x": 1})"));  // "1" != 1
  CHECK(holds(R"({"x": [1, 2]})", R"({"x": [true, 2.0]})"));
  CHECK(holds(R"({"x": null})", R"({})"));  // a missing path is None
  CHECK(holds(R"({"a.b": 2})", R"({"a": {"b": 2}})"));
  CHECK_FALSE(holds(R"({"a.b": 2})", R"({"a": [2]})"));  // no walking into lists
  CHECK(holds(R"({"x": {"==": true}})", R"({"x": 1})"));
  CHECK(holds(R"({"x": {"!=": 2}})", R"({})"));
  CHECK(holds(R"({"x": 18446744073709551615})", R"({"x": 18446744073709551615})"));
  CHECK_FALSE(holds(R"({"x": 9007199254740993})", R"({"x": 9007199254740992.0})"));
  CHECK(python_equal(json::parse(R"({"a": 1, "b": [true]})"),
                     json::parse(R"({"b": [1], "a": 1.0})")));
}

TEST_CASE("where ordering is Python's, and a missing value orders with nothing",
          "[runtime][where]") {
  CHECK(holds(R"({"x": {">": 0}})", R"({"x": true})"));  // True > 0
  CHECK(holds(R"({"x": {">=": 2.5, "<": 3}})", R"({"x": 2.5})"));
  CHECK(holds(R"({"x": {"<": "b"}})", R"({"x": "a"})"));
  CHECK(holds(R"({"x": {"<": [1, 3]}})", R"({"x": [1, 2, 9]})"));
  CHECK(holds(R"({"x": {"<": [1, 2]}})", R"({"x": [1]})"));
  CHECK(holds(R"({"x": {"<": -1}})", R"({"x": -18446744073709551})"));
  CHECK(holds(R"({"x": {"<": 18446744073709551615}})", R"({"x": -1})"));
  CHECK_FALSE(holds(R"({"x": {">": 0}})", R"({})"));
  CHECK_FALSE(holds(R"({"x": {"<=": 0}})", R"({"x": null})"));
}

TEST_CASE("where raises Python's TypeError where Python would", "[runtime][where]") {
  CHECK(raised(R"({"p": {">=": 3}})", R"({"p": "high"})") ==
        "where[\"p\"] >=: TypeError: '>=' not supported between instances of 'str' and 'int'");
  CHECK(raised(R"({"p": {"<": {"a": 1}}})", R"({"p": {"a": 1}})") ==
        "where[\"p\"] <: TypeError: '<' not supported between instances of 'dict' and 'dict'");
  CHECK(raised(R"({"p": {"<": [1, "a"]}})", R"({"p": [1, 2]})") ==
        "where[\"p\"] <: TypeError: '<' not supported between instances of 'int' and 'str'");
  CHECK(raised(R"({"p": {"in": "abc"}})", R"({"p": 1})") ==
        "where[\"p\"] in: TypeError: 'in <string>' requires string as left operand, not int");
  CHECK(raised(R"({"p": {"in": "abc"}})", R"({})") ==
        "where[\"p\"] in: TypeError: 'in <string>' requires string as left operand, not NoneType");
  CHECK(raised(R"({"p": {"not in": 5}})", R"({"p": 1})") ==
        "where[\"p\"] not in: TypeError: argument of type 'int' is not iterable");
  CHECK(raised(R"({"p": {"in": {"a": 1}}})", R"({"p": ["a"]})") ==
        "where[\"p\"] in: TypeError: unhashable type: 'list'");
}

TEST_CASE("where in is Python's membership", "[runtime][where]") {
  CHECK(holds(R"({"p": {"in": [0, 1]}})", R"({"p": true})"));
  CHECK(holds(R"({"p": {"in": "a bug here"}})", R"({"p": "bug"})"));
  CHECK(holds(R"({"p": {"in": {"a": 1}}})", R"({"p": "a"})"));
  CHECK_FALSE(holds(R"({"p": {"in": {"1": 1}}})", R"({"p": 1})"));
  CHECK(holds(R"({"p": {"not in": [1, 2]}})", R"({})"));  // None not in [1, 2]
  CHECK(holds(R"({"p": {"in": [null]}})", R"({})"));
}
