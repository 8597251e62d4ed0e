// The child's half of strict isolation (sandbox/isolation.h), applied by the
// trial child to itself after its program and libraries are loaded, so the
// code it then runs sees only what it is given.
//
// The parent starts the child in new user, mount, PID, network and IPC
// namespaces (spawn.h, SpawnRequest::strict), so the child is PID 1 of its
// namespace. PID 1 ignores every signal it has no handler for unless it comes
// from outside the namespace, SIGXCPU and a re-raised SIGSYS included, so the
// trial does not run as PID 1: enter_namespaces builds the root, then forks;
// the first process stays as the namespace's init and mirrors the trial's
// end as its own exit status (a signal s as kSignalExitBase + s, which the
// parent reads back as the signal), and the second returns and runs the trial.
//
// Order, and why:
//   1. (init) make every mount private, mount a tmpfs on `new_root`, bind the
//      packs read-only and the scratch store read-write at their own paths,
//      mount a /proc of the new PID namespace, pivot_root into it, detach the
//      old root, make the new root read-only; fork;
//   2. (trial) the caller applies its rlimits (sandbox/rlimits.h);
//   3. (trial) lock_down: drop every capability, then no_new_privs and the
//      seccomp filter (sandbox/syscall_filter.h), last, as nothing after it
//      may need a refused call.
// Each step that fails is a warning (the call, the path and errno, and what
// the trial can therefore reach), never a silent skip and never a refusal to
// run: the nets that did apply still hold.
#pragma once

#include <string>
#include <vector>

#include "sandbox/job.h"

namespace forktrial::sandbox {

// The init reports a trial killed by signal s as exit status this + s.
inline constexpr int kSignalExitBase = 128;

struct Confinement {
  std::string new_root;                // an empty directory the root is mounted on
  std::vector<std::string> read_only;  // directories shown read-only at their own paths
  std::vector<std::string> writable;   // directories shown read-write at their own paths
};

// The packs of the job's specification read-only, its scratch store
// read-write; new_root from the job.
Confinement confinement_for(const ChildJob& job);

// Whether this process runs in the namespaces the parent made: it is PID 1.
bool in_strict_namespaces();

// Step 1 when in_strict_namespaces(), else nothing. Returns, in the trial
// process, the warnings for what did not apply; the init never returns.
std::vector<std::string> enter_namespaces(const Confinement& confinement);

// Step 3: the warnings for what did not apply (empty when all did). `exec`:
// the filter for a program the child then execs (install_syscall_filter).
std::vector<std::string> lock_down(bool exec = false);

}  // namespace forktrial::sandbox
