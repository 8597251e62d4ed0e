#include "store/ids.h"

#include <cstdio>

namespace forktrial::store {

EventId numbered_event_id(std::uint64_t n) {
  char text[32];
  std::snprintf(text, sizeof text, "evt_%03llu", static_cast<unsigned long long>(n));
  return EventId(text);
}

RunKind run_kind(std::string_view id) {
  if (id.starts_with(kInternalRunPrefix)) return RunKind::internal;
  if (id.starts_with(kTrialForkPrefix) || id.starts_with(kJobForkPrefix)) {
    return RunKind::trial_fork;
  }
  return RunKind::user;
}

RunId trial_fork_id(const RunId& drawn) {
  std::string_view rest = drawn.str();
  if (rest.starts_with("run_")) rest.remove_prefix(4);
  return RunId(std::string(kTrialForkPrefix) + std::string(rest));
}

}  // namespace forktrial::store
