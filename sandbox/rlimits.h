// The kernel-enforced nets of a trial child: RLIMIT_AS (memory) and
// RLIMIT_CPU (wall clock + 5 s of CPU time). Applied by the child to itself
// before it reads any pack code.
//
// A net the host refuses is not skipped in silence: `apply_nets` returns one
// warning per degraded net, naming the net, the call and its errno, and what
// still bounds the trial. The caller folds the warnings into the report.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sandbox/trial_types.h"

namespace forktrial::sandbox {

// The system call that sets a limit, injectable so tests can simulate a host
// that refuses one (returns -1 and sets errno like setrlimit).
using SetRlimit = std::function<int(int resource, const rlimit& limit)>;

// The real setrlimit(2).
SetRlimit system_setrlimit();

// CPU seconds a trial may use: `max_cpu_seconds` when set, else the wall
// clock rounded up plus 5 s; 0 when neither net is set.
std::uint64_t cpu_seconds_for(const TrialLimits& limits);

// Applies the nets `limits` asks for (and disables core dumps, so a killed
// child leaves nothing behind); returns the warnings (empty when every
// net applied).
std::vector<std::string> apply_nets(const TrialLimits& limits, const SetRlimit& set_limit);

}  // namespace forktrial::sandbox
