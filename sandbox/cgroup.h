// A trial's cgroup: the strict isolation's memory and task caps, enforced by
// the kernel on the child and everything it starts.
//
// Made as `forktrial-<pid>-<n>` inside the cgroup this process is in (so a
// trial stays within whatever caps its caller), on cgroup v2 when the memory
// and pids controllers are available to that cgroup's children, else on the
// cgroup v1 memory and pids hierarchies (one directory in each). Hierarchies
// are looked for at /sys/fs/cgroup (v2 alone), /sys/fs/cgroup/unified (v2
// beside v1), and /sys/fs/cgroup/memory and /sys/fs/cgroup/pids (v1).
//
// The child joins it itself, before exec, by writing 0 to the cgroup.procs
// descriptors `procs()` holds open; the owner removes the directories when
// destroyed (retrying while the kernel still counts exiting tasks).
//
// A TrialCgroup belongs to one thread; any number may exist at once.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"

namespace forktrial::sandbox {

class TrialCgroup {
 public:
  // Creates the cgroup with a memory limit (real memory, page cache and
  // tmpfs included; none when nullopt) and a task limit. The error says
  // which hierarchies were tried and why each cannot be used (the failing
  // call, path and errno); nothing is left behind then.
  static std::expected<TrialCgroup, Status> create(std::optional<std::uint64_t> memory_bytes,
                                                   std::uint64_t max_tasks);
  TrialCgroup(TrialCgroup&& other) noexcept;
  TrialCgroup& operator=(TrialCgroup&&) = delete;
  TrialCgroup(const TrialCgroup&) = delete;
  TrialCgroup& operator=(const TrialCgroup&) = delete;
  ~TrialCgroup();

  // The open cgroup.procs files (one per hierarchy), write-only, close-on-exec.
  const std::vector<UniqueFd>& procs() const { return procs_; }

  // What the limits refused so far: forks refused by the task limit, and
  // tasks the memory limit's OOM killer killed. Unreadable counters are 0.
  struct Events {
    std::uint64_t tasks_refused = 0;
    std::uint64_t oom_kills = 0;
  };
  Events events() const;

  // "cgroup v1 memory+pids at /sys/fs/cgroup/memory/..., ..." for reports.
  const std::string& description() const { return description_; }

 private:
  TrialCgroup() = default;
  std::vector<std::filesystem::path> dirs_;  // removed in reverse order
  std::filesystem::path memory_dir_;
  std::filesystem::path pids_dir_;
  bool v2_ = false;
  std::vector<UniqueFd> procs_;
  std::string description_;
};

// Where create() would make a trial's cgroup and how ("cgroup v2 at ...",
// "cgroup v1 memory at ... and pids at ..."), or why it cannot.
std::expected<std::string, Status> probe_trial_cgroups();

}  // namespace forktrial::sandbox
