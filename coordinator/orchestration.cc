#include "coordinator/orchestration.h"

#include "sandbox/limit_units.h"

namespace forktrial::coordinator {

std::string_view keep_forks_name(KeepForks keep) {
  switch (keep) {
    case KeepForks::all:
      return "all";
    case KeepForks::failures:
      return "failures";
    case KeepForks::none:
      return "none";
  }
  return "all";
}

std::optional<KeepForks> parse_keep_forks(std::string_view name) {
  for (const KeepForks keep : {KeepForks::all, KeepForks::failures, KeepForks::none}) {
    if (keep_forks_name(keep) == name) return keep;
  }
  return std::nullopt;
}

std::optional<Duration> parse_retention_age(std::string_view text) {
  double seconds = -1;
  if (text.size() > 1 && text.back() == 'd') {
    if (auto days = sandbox::parse_duration_seconds(text.substr(0, text.size() - 1))) {
      seconds = *days * 86'400;
    }
  } else if (auto parsed = sandbox::parse_duration_seconds(text)) {
    seconds = *parsed;
  }
  if (!(seconds >= 0) || seconds > 100.0 * 365 * 86'400) return std::nullopt;
  return Duration(static_cast<Duration::rep>(seconds * 1000));
}

}  // namespace forktrial::coordinator
