#include "runtime/where.h"

#include <array>
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

// -1, 0, 1, or nullopt when Python would not order the two.
std::optional<int> order(const json& a, const json& b) {
  if (a.is_number() && b.is_number() && !a.is_boolean() && !b.is_boolean()) {
    const double x = a.get<double>();
    const double y = b.get<double>();
    if (a.is_number_integer() && b.is_number_integer()) {
      if (a.is_number_unsigned() || b.is_number_unsigned()) {
        // Compare through the signs first so neither side overflows.
        if (a.is_number_unsigned() && !b.is_number_unsigned() && b.get<std::int64_t>() < 0)
          return 1;
        if (b.is_number_unsigned() && !a.is_number_unsigned() && a.get<std::int64_t>() < 0)
          return -1;
        const auto u = a.get<std::uint64_t>();
        const auto v = b.get<std::uint64_t>();
        return u < v ? -1 : (u > v ? 1 : 0);
      }
      const auto u = a.get<std::int64_t>();
      const auto v = b.get<std::int64_t>();
      return u < v ? -1 : (u > v ? 1 : 0);
    }
    if (x != x || y != y) return std::nullopt;  // NaN orders with nothing
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return std::nullopt;
}

std::optional<bool> contains(const json& item, const json& container) {
  if (container.is_array()) {
    for (const auto& element : container) {
      if (element == item) return true;
    }
    return false;
  }
  if (container.is_string() && item.is_string()) {
    return container.get_ref<const std::string&>().find(item.get_ref<const std::string&>()) !=
           std::string::npos;
  }
  if (container.is_object() && item.is_string()) {
    return container.contains(item.get_ref<const std::string&>());
  }
  return std::nullopt;
}

bool holds(std::string_view op, const json& actual, const json& value) {
  if (op == "==") return actual == value;
  if (op == "!=") return actual != value;
  if (op == "in" || op == "not in") {
    const auto in = contains(actual, value);
    if (!in) return false;
    return op == "in" ? *in : !*in;
  }
  if (actual.is_null()) return false;
  const auto c = order(actual, value);
  if (!c) return false;
  if (op == ">") return *c > 0;
  if (op == "<") return *c < 0;
  if (op == ">=") return *c >= 0;
  return *c <= 0;  // "<="
}

}  // namespace

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

bool where_holds(const json& where, const json& payload) {
  for (const auto& [path, expected] : where.items()) {
    const json actual = resolve(payload, path);
    if (expected.is_object()) {
      for (const auto& [op, value] : expected.items()) {
        if (!holds(op, actual, value)) return false;
      }
    } else if (actual != expected) {
      return false;
    }
  }
  return true;
}

}  // namespace forktrial::runtime
