// The parent's half of strict isolation for one child (sandbox/isolation.h,
// sandbox/confine.h has the child's), shared by forktrial's Lua child and
// the launch of activegraph's child (sandbox/activegraph_child.h).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/cgroup.h"
#include "sandbox/delta.h"
#include "sandbox/job.h"
#include "sandbox/spawn.h"
#include "sandbox/trial.h"

namespace forktrial::sandbox {

// The cgroup the child joins, and the warnings for what this host cannot
// apply. Inactive for standard isolation. Owns the cgroup, so it must
// outlive the child; its destructor removes the cgroup.
struct StrictParent {
  bool active = false;
  std::optional<TrialCgroup> cgroup;
  std::vector<std::string> warnings;
};

// Prepares strict isolation when `options` asks for it: marks the job
// strict with an empty root directory in `scratch_dir`, and makes the
// cgroup (capping real memory at the limits' max_rss_bytes), whose absence
// is a warning.
StrictParent prepare_strict(const ChildOptions& options, const TrialLimits& limits,
                            const std::filesystem::path& scratch_dir, ChildJob& job);

// Starts and supervises the child under `strict`; a strict child's init
// reports a trial's death by signal as an exit status, read back here as
// the signal.
ChildResult run_strict_child(SpawnRequest request, const StrictParent& strict);

// What the strict nets stopped, in the verdict: the cgroup's OOM kill and
// task limit as limits_exceeded naming the limit, a system call the filter
// refused as a crash naming the call, and every net this host could not
// apply as a warning.
void add_strict_findings(TrialVerdict& verdict, const ChildResult& child,
                         const StrictParent& strict, const TrialLimits& limits);

// How every forktrial-child is started: the closed environment, the job on
// stdin.
SpawnRequest child_request(const ChildOptions& options, const ChildJob& job,
                           std::chrono::milliseconds wall_clock);

}  // namespace forktrial::sandbox
