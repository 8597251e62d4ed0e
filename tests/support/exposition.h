// Prometheus's text exposition format (0.0.4), read back strictly for tests
// of the daemons' /metrics: every line must be a `# HELP name text`, a
// `# TYPE name type` or a sample `name{label="value",...} value`, each
// sample's family typed before it, no series twice.
#pragma once

#include <expected>
#include <map>
#include <string>
#include <string_view>

namespace forktrial::testing {

struct Exposition {
  // Each sample's value, keyed by its series: the name, then its labels
  // sorted by name as {a="1",b="2"} (nothing when it has none).
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;  // family name -> counter, gauge, histogram, ...

  // The value of `series` ("forktrial_trials{status=\"queued\"}"); throws
  // std::out_of_range naming it when there is no such sample.
  double at(const std::string& series) const;
  bool has(const std::string& series) const { return samples.contains(series); }
};

// The exposition, or what is wrong with it: the line number, the line, why.
std::expected<Exposition, std::string> parse_exposition(std::string_view text);

}  // namespace forktrial::testing
