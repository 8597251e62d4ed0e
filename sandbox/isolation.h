// How strongly a trial child is isolated, and what of it this host can apply.
//
// `standard` is a fresh, resource-capped process (sandbox/rlimits.h).
// `strict` adds four nets, each applied independently (docs/trials.md,
// "Strict isolation"):
//   namespaces  new user, mount, PID, network and IPC namespaces; the child
//               pivots into a root holding only its packs (read-only) and its
//               scratch store, sees only its own processes, and has no
//               network but a loopback that is down;
//   seccomp     a seccomp-bpf allow-list of the system calls the child needs;
//               any other call traps (SIGSYS) and ends the trial, named;
//   cgroup      a cgroup of its own (v2 when its memory and pids controllers
//               are available, else v1 memory + pids) capping real memory
//               (max_rss_bytes) and tasks (kStrictMaxTasks), removed after;
//   no privileges  every capability dropped and no_new_privs set.
// A net the host cannot apply is a warning in the trial's report, never a
// silent skip; the trial still runs under the nets that do apply.
//
// Plain values and a probe; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial::sandbox {

enum class Isolation { standard, strict };

std::string_view isolation_name(Isolation isolation);  // "standard", "strict"
std::optional<Isolation> parse_isolation(std::string_view name);

// The most tasks (processes and threads, the child's own init included) a
// strict trial may hold at once: its cgroup's pids limit.
inline constexpr std::uint64_t kStrictMaxTasks = 32;

// One net of strict isolation on this host: whether it applies and what
// provides it, or why it does not (with the failing call and errno).
struct StrictNet {
  std::string name;  // "namespaces", "seccomp", "cgroup"
  bool applies = false;
  std::string how;
};

// Probes this host: creates (and discards) the namespaces in a throwaway
// child, checks the kernel's seccomp support and finds a cgroup hierarchy it
// may create cgroups in. Takes a few milliseconds; never throws for what the
// host lacks (that is a net that does not apply).
std::vector<StrictNet> probe_strict_nets();

// How one net held for one trial: applied as asked, degraded (the host
// refused it; a warning says how), or off (the trial's limits or its
// isolation level did not ask for it).
enum class NetState { applied, degraded, off };
std::string_view net_state_name(NetState state);  // "applied", "degraded", "off"

struct TrialNet {
  std::string name;  // "process", "memory", "cpu", ..., "privileges"
  NetState state = NetState::applied;
  std::string detail;  // the warning that degraded it, or what it is
  friend bool operator==(const TrialNet&, const TrialNet&) = default;
};

// The isolation one trial had: its level and every net, so that a result
// can be judged without asking the machine that ran it. Built by
// trial_isolation (sandbox/trial_types.h) from the trial's limits and the
// warnings its run raised.
struct TrialIsolation {
  Isolation level = Isolation::standard;
  std::vector<TrialNet> nets;
  friend bool operator==(const TrialIsolation&, const TrialIsolation&) = default;
};

}  // namespace forktrial::sandbox
