#include "sandbox/rlimits.h"

#include <cerrno>
#include <cmath>

#include "base/unique_fd.h"

namespace forktrial::sandbox {

SetRlimit system_setrlimit() {
  return [](int resource, const rlimit& limit) {
    return ::setrlimit(static_cast<__rlimit_resource_t>(resource), &limit);
  };
}

std::uint64_t cpu_seconds_for(const TrialLimits& limits) {
  if (limits.max_cpu_seconds) return *limits.max_cpu_seconds;
  if (limits.wall_clock_seconds <= 0) return 0;
  return static_cast<std::uint64_t>(std::ceil(limits.wall_clock_seconds)) + 5;
}

std::vector<std::string> apply_nets(const TrialLimits& limits, const SetRlimit& set_limit) {
  std::vector<std::string> warnings;
  if (limits.max_rss_bytes && *limits.max_rss_bytes > 0) {
    rlimit as{static_cast<rlim_t>(*limits.max_rss_bytes),
              static_cast<rlim_t>(*limits.max_rss_bytes)};
    if (set_limit(RLIMIT_AS, as) != 0) {
      const int error = errno;
      warnings.push_back("memory net degraded: setrlimit(RLIMIT_AS, " +
                         std::to_string(*limits.max_rss_bytes) + "): " + errno_text(error) +
                         "; the Lua allocator cap, the wall-clock kill and the event budget "
                         "still bound the trial");
    }
  } else {
    // Off by the trial's own choice; announced all the same, like a net the
    // host refused, so a report never hides that nothing bounded memory.
    warnings.push_back(
        "memory net off: max_rss_bytes is not set, so neither RLIMIT_AS nor the Lua allocator "
        "cap bounds the trial's memory; the wall-clock kill, the CPU net and the event budget "
        "still bound the trial");
  }
  rlimit no_core{0, 0};
  set_limit(RLIMIT_CORE, no_core);
  if (const auto seconds = cpu_seconds_for(limits); seconds > 0) {
    // The soft limit raises SIGXCPU, which the parent reports as the CPU net;
    // the hard limit one second later is the kernel's SIGKILL backstop.
    rlimit cpu{static_cast<rlim_t>(seconds), static_cast<rlim_t>(seconds + 1)};
    if (set_limit(RLIMIT_CPU, cpu) != 0) {
      const int error = errno;
      warnings.push_back("CPU net degraded: setrlimit(RLIMIT_CPU, " + std::to_string(seconds) +
                         "): " + errno_text(error) +
                         "; the wall-clock kill and the event budget still bound the trial");
    }
  }
  return warnings;
}

}  // namespace forktrial::sandbox
