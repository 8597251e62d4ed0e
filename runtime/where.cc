#include "runtime/where.h"

#include <array>
#include <cmath>
#include <string_view>

namespace forktrial::runtime {
namespace {

using json = nlohmann::ordered_json;

constexpr std::array<std::string_view, 8> kOps = {">", "<", ">=", "<=", "==", "!=", "in", "not in"};

json resolve(const json& root, std::string_view path) {
  const json* current = &root;
  for (;;) {
    const auto dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!current->is_object()) return nullptr;
    const auto it = current->find(key);
    if (it == current->end() || it->is_null()) return nullptr;
    current = &*it;
    if (dot == std::string_view::npos) return *current;
    path.remove_prefix(dot + 1);
  }
}

// The name Python's TypeError messages give the value's type.
std::string python_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "NoneType";
    case json::value_t::boolean:
      return "bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "int";
    case json::value_t::number_float:
      return "float";
    case json::value_t::string:
      return "str";
    case json::value_t::array:
      return "list";
    case json::value_t::object:
      return "dict";
    default:
      return "object";
  }
}

// Booleans are Python ints.
bool is_python_number(const json& v) {
  return v.is_number() || v.is_boolean();
}

// -1, 0 or 1 for two Python numbers; nullopt when one is NaN (it orders
// with nothing and equals nothing). Integers compare exactly; an integer and
// a float through long double, which holds every 64-bit integer exactly.
std::optional<int> compare_numbers(const json& a, const json& b) {
  auto as_int = [](const json& v) -> std::optional<std::int64_t> {
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
    return std::nullopt;
  };
  const bool a_unsigned = a.is_number_unsigned();
  const bool b_unsigned = b.is_number_unsigned();
  if (!a.is_number_float() && !b.is_number_float()) {
    if (a_unsigned || b_unsigned) {
      if (!a_unsigned && *as_int(a) < 0) return -1;
      if (!b_unsigned && *as_int(b) < 0) return 1;
      const auto u = a_unsigned ? a.get<std::uint64_t>() : static_cast<std::uint64_t>(*as_int(a));
      const auto v = b_unsigned ? b.get<std::uint64_t>() : static_cast<std::uint64_t>(*as_int(b));
      return u < v ? -1 : (u > v ? 1 : 0);
    }
    const auto u = *as_int(a);
    const auto v = *as_int(b);
    return u < v ? -1 : (u > v ? 1 : 0);
  }
  auto wide = [&](const json& v) -> long double {
    if (v.is_number_float()) return v.get<double>();
    if (v.is_number_unsigned()) return static_cast<long double>(v.get<std::uint64_t>());
    return static_cast<long double>(*as_int(v));
  };
  const long double x = wide(a);
  const long double y = wide(b);
  if (std::isnan(x) || std::isnan(y)) return std::nullopt;
  return x < y ? -1 : (x > y ? 1 : 0);
}

// Python's rich comparison for an ordering op: the result of `a op b`, or
// the TypeError Python raises.
std::expected<bool, Status> python_order(std::string_view op, const json& a, const json& b) {
  auto verdict = [op](int c) {
    if (op == ">") return c > 0;
    if (op == "<") return c < 0;
    if (op == ">=") return c >= 0;
    return c <= 0;  // "<="
  };
  if (is_python_number(a) && is_python_number(b)) {
    const auto c = compare_numbers(a, b);
    return c && verdict(*c);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return verdict(c < 0 ? -1 : (c > 0 ? 1 : 0));
  }
  if (a.is_array() && b.is_array()) {
    // The first items that differ decide, compared with the same op; when
    // one list is a prefix of the other, the lengths decide.
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (!python_equal(a[i], b[i])) return python_order(op, a[i], b[i]);
    }
    const std::size_t x = a.size();
    const std::size_t y = b.size();
    return verdict(x < y ? -1 : (x > y ? 1 : 0));
  }
  return failure(ErrorCode::invalid_argument,
                 "TypeError: '" + std::string(op) + "' not supported between instances of '" +
                     python_type(a) + "' and '" + python_type(b) + "'");
}

// Python's `item in container`, or its TypeError.
std::expected<bool, Status> python_in(const json& item, const json& container) {
  if (container.is_array()) {
    for (const auto& element : container) {
      if (python_equal(element, item)) return true;
    }
    return false;
  }
  if (container.is_string()) {
    if (!item.is_string()) {
      return failure(
          ErrorCode::invalid_argument,
          "TypeError: 'in <string>' requires string as left operand, not " + python_type(item));
    }
    return container.get_ref<const std::string&>().find(item.get_ref<const std::string&>()) !=
           std::string::npos;
  }
  if (container.is_object()) {
    if (item.is_array() || item.is_object()) {
      return failure(ErrorCode::invalid_argument,
                     "TypeError: unhashable type: '" + python_type(item) + "'");
    }
    // JSON keys are strings: nothing else is a key.
    return item.is_string() && container.contains(item.get_ref<const std::string&>());
  }
  return failure(ErrorCode::invalid_argument,
                 "TypeError: argument of type '" + python_type(container) + "' is not iterable");
}

std::expected<bool, Status> holds(std::string_view op, const json& actual, const json& value) {
  if (op == "==") return python_equal(actual, value);
  if (op == "!=") return !python_equal(actual, value);
  if (op == "in" || op == "not in") {
    const auto in = python_in(actual, value);
    if (!in) return in;
    return op == "in" ? *in : !*in;
  }
  if (actual.is_null()) return false;  // `a is not None and a > b`
  return python_order(op, actual, value);
}

}  // namespace

bool python_equal(const json& a, const json& b) {
  if (is_python_number(a) && is_python_number(b)) {
    const auto c = compare_numbers(a, b);
    return c && *c == 0;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!python_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items()) {
      const auto other = b.find(key);
      if (other == b.end() || !python_equal(value, *other)) return false;
    }
    return true;
  }
  return a == b;  // null, strings
}

std::optional<std::string> where_problem(const json& where) {
  if (!where.is_object()) return "where must be a table of \"<path>\" = <value or {op = value}>";
  for (const auto& [path, expected] : where.items()) {
    if (!expected.is_object()) continue;
    for (const auto& [op, value] : expected.items()) {
      bool known = false;
      for (auto candidate : kOps) known = known || candidate == op;
      if (!known) {
        return "where[\"" + path + "\"] uses the operator \"" + op +
               "\"; the operators are >, <, >=, <=, ==, !=, in and not in";
      }
    }
  }
  return std::nullopt;
}

std::expected<bool, Status> where_holds(const json& where, const json& payload) {
  for (const auto& [path, expected] : where.items()) {
    const json actual = resolve(payload, path);
    if (expected.is_object()) {
      for (const auto& [op, value] : expected.items()) {
        const auto held = holds(op, actual, value);
        if (!held)
          return failure(ErrorCode::invalid_argument,
                         "where[\"" + path + "\"] " + op + ": " + held.error().message);
        if (!*held) return false;
      }
    } else if (!python_equal(actual, expected)) {
      return false;
    }
  }
  return true;
}

}  // namespace forktrial::runtime
