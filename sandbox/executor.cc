#include "sandbox/executor.h"

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
}

TrialReport LocalSubprocessExecutor::execute(store::EventStore& store,
                                             const TrialSpecification& spec) {
  return run_trial(store, spec, options_);
}

}  // namespace forktrial::sandbox
