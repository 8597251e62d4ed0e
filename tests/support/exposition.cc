#include "tests/support/exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

namespace forktrial::testing {
namespace {

bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}

// A metric (or, with `colon` false, a label) name at the front of `rest`,
// taken off it; empty when there is none.
std::string take_name(std::string_view& rest, bool colon = true) {
  std::size_t n = 0;
  while (n < rest.size() && name_char(rest[n]) && (colon || rest[n] != ':') &&
         (n > 0 || name_start(rest[n]))) {
    ++n;
  }
  std::string name(rest.substr(0, n));
  rest.remove_prefix(n);
  return name;
}

// A sample value: a float as Go's ParseFloat takes it, or +Inf, -Inf, NaN.
std::expected<double, std::string> value_of(std::string_view text) {
  if (text == "+Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  if (text == "NaN") return NAN;
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() ||
      copy.find_first_of("xXpP") != copy.npos) {
    return std::unexpected("\"" + copy + "\" is not a sample value");
  }
  return value;
}

// The family a sample of `name` belongs to, given the types declared:
// histogram and summary samples carry a suffix.
std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.contains(name)) return name;
  for (const std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      std::string base = name.substr(0, name.size() - suffix.size());
      const auto type = types.find(base);
      if (type != types.end() && (type->second == "histogram" || type->second == "summary") &&
          (suffix != "_bucket" || type->second == "histogram")) {
        return base;
      }
    }
  }
  return {};
}

// One sample line into `out`; what is wrong with it otherwise.
std::expected<void, std::string> read_sample(std::string_view line, Exposition& out) {
  std::string_view rest = line;
  const std::string name = take_name(rest);
  if (name.empty()) return std::unexpected("no metric name");
  if (family_of(name, out.types).empty()) {
    return std::unexpected("sample of " + name + " before a # TYPE line of its family");
  }
  std::map<std::string, std::string> labels;
  if (!rest.empty() && rest.front() == '{') {
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() != '}') {
      const std::string label = take_name(rest, false);
      if (label.empty()) return std::unexpected("a label name is expected");
      if (rest.size() < 2 || rest.substr(0, 2) != "=\"") {
        return std::unexpected("label " + label + " has no =\"value\"");
      }
      rest.remove_prefix(2);
      std::string value;
      bool closed = false;
      while (!rest.empty()) {
        const char c = rest.front();
        rest.remove_prefix(1);
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\n') return std::unexpected("a raw newline in a label value");
        if (c == '\\') {
          if (rest.empty()) break;
          const char escaped = rest.front();
          rest.remove_prefix(1);
          if (escaped == 'n') {
            value += '\n';
          } else if (escaped == '\\' || escaped == '"') {
            value += escaped;
          } else {
            return std::unexpected(std::string("the escape \\") + escaped + " in a label value");
          }
          continue;
        }
        value += c;
      }
      if (!closed) return std::unexpected("label " + label + "'s value is not closed");
      if (!labels.emplace(label, value).second) {
        return std::unexpected("label " + label + " twice");
      }
      if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
    }
    if (rest.empty()) return std::unexpected("the labels are not closed with }");
    rest.remove_prefix(1);
  }
  if (rest.empty() || rest.front() != ' ') return std::unexpected("no space before the value");
  rest.remove_prefix(1);
  const std::size_t space = rest.find(' ');
  auto value = value_of(rest.substr(0, space));
  if (!value) return std::unexpected(value.error());
  if (space != std::string_view::npos) {
    const std::string_view timestamp = rest.substr(space + 1);
    if (timestamp.empty() || timestamp.find_first_not_of("-0123456789") != timestamp.npos) {
      return std::unexpected("\"" + std::string(timestamp) + "\" is not a timestamp");
    }
  }
  std::string series = name;
  if (!labels.empty()) {
    series += '{';
    bool first = true;
    for (const auto& [label, text] : labels) {
      if (!first) series += ',';
      first = false;
      series += label + "=\"" + text + "\"";
    }
    series += '}';
  }
  if (!out.samples.emplace(series, *value).second) {
    return std::unexpected("series " + series + " twice");
  }
  return {};
}

// A # HELP or # TYPE line into `out` (other comments are allowed and
// skipped).
std::expected<void, std::string> read_comment(std::string_view line, Exposition& out,
                                              std::map<std::string, bool>& helped) {
  std::string_view rest = line.substr(1);
  if (rest.empty() || rest.front() != ' ') return {};
  rest.remove_prefix(1);
  const bool help = rest.starts_with("HELP ");
  const bool type = rest.starts_with("TYPE ");
  if (!help && !type) return {};
  rest.remove_prefix(5);
  const std::string name = take_name(rest);
  if (name.empty()) return std::unexpected("a # HELP or # TYPE line names no metric");
  if (!rest.empty() && rest.front() != ' ') return std::unexpected("no space after " + name);
  if (!rest.empty()) rest.remove_prefix(1);
  if (help) {
    if (std::exchange(helped[name], true)) return std::unexpected("a second # HELP of " + name);
    return {};
  }
  static const std::vector<std::string_view> kTypes = {"counter", "gauge", "histogram", "summary",
                                                       "untyped"};
  if (std::find(kTypes.begin(), kTypes.end(), rest) == kTypes.end()) {
    return std::unexpected("\"" + std::string(rest) + "\" is not a metric type");
  }
  if (!out.types.emplace(name, std::string(rest)).second) {
    return std::unexpected("a second # TYPE of " + name);
  }
  return {};
}

}  // namespace

double Exposition::at(const std::string& series) const {
  const auto found = samples.find(series);
  if (found == samples.end()) throw std::out_of_range("no sample of " + series);
  return found->second;
}

std::expected<Exposition, std::string> parse_exposition(std::string_view text) {
  Exposition out;
  std::map<std::string, bool> helped;
  std::size_t number = 0;
  while (!text.empty()) {
    ++number;
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      return std::unexpected("line " + std::to_string(number) + " does not end with a newline");
    }
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    std::expected<void, std::string> read;
    if (line.empty()) {
      read = std::unexpected(std::string("an empty line"));
    } else if (line.front() == '#') {
      read = read_comment(line, out, helped);
    } else {
      read = read_sample(line, out);
    }
    if (!read) {
      return std::unexpected("line " + std::to_string(number) + " (" + std::string(line) +
                             "): " + read.error());
    }
  }
  return out;
}

}  // namespace forktrial::testing
