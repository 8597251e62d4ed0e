#include "sandbox/executor.h"

#include <algorithm>

namespace forktrial::sandbox {

LocalSubprocessExecutor::LocalSubprocessExecutor(ChildOptions options)
    : options_(std::move(options)) {
  isolation_.process = {true,
                        "each trial runs in a fresh forktrial-child (posix_spawn + exec) in its "
                        "own process group, killed as a group on the wall clock"};
  isolation_.filesystem = {false,
                           "the child runs as the caller's user and can read and write what that "
                           "user can; it writes its events only to a scratch store"};
  isolation_.network = {false,
                        "no network namespace; Lua packs get no socket API, but the child "
                        "process itself is not cut off"};
  isolation_.syscalls = {false, "no seccomp filter; use a container for that"};
  isolation_.environment = {true,
                            "closed allow-list: PATH, HOME, LANG and the names in "
                            "env_passthrough"};
  isolation_.security_sandbox = {false,
                                 "crash and resource isolation, not a security boundary: run "
                                 "hostile code inside a container or VM"};
  if (options_.isolation == Isolation::strict) add_strict_guarantees();
}

void LocalSubprocessExecutor::add_strict_guarantees() {
  isolation_.level = Isolation::strict;
  const auto nets = probe_strict_nets();
  auto net = [&](std::string_view name) {
    return *std::find_if(nets.begin(), nets.end(), [&](const auto& n) { return n.name == name; });
  };
  const StrictNet& namespaces = net("namespaces");
  const StrictNet& seccomp = net("seccomp");
  const StrictNet& cgroup = net("cgroup");
  isolation_.process.how += "; " + std::string(namespaces.applies ? "" : "not ") +
                            "in its own PID namespace; " +
                            (cgroup.applies ? "cgroup: " : "no cgroup: ") + cgroup.how;
  if (namespaces.applies) {
    isolation_.filesystem = {true,
                             "mount namespace: pivot_root into a root holding only the packs "
                             "(read-only), the scratch store and its own /proc"};
    isolation_.network = {true, "network namespace with only a loopback, down"};
  } else {
    isolation_.filesystem.how = namespaces.how;
    isolation_.network.how = namespaces.how;
  }
  isolation_.syscalls = {seccomp.applies, seccomp.how};
  isolation_.security_sandbox = {
      namespaces.applies && seccomp.applies,
      namespaces.applies && seccomp.applies
          ? "strict isolation: user, mount, PID, network and IPC namespaces, no capabilities, "
            "a seccomp allow-list" +
                std::string(cgroup.applies ? " and a cgroup" : "") +
                "; the kernel is still shared, so a kernel exploit is out of its reach: for that, "
                "a VM"
          : "strict isolation is incomplete on this host: " +
                (namespaces.applies ? seccomp.how : namespaces.how)};
}

TrialReport LocalSubprocessExecutor::execute(store::EventStore& store,
                                             const TrialSpecification& spec) {
  return run_trial(store, spec, options_);
}

}  // namespace forktrial::sandbox
