#include "sandbox/isolation.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "base/unique_fd.h"
#include "sandbox/cgroup.h"

namespace forktrial::sandbox {

std::vector<StrictNet> probe_strict_nets() {
  std::vector<StrictNet> nets;
  {
    // The same clone a strict child starts with; the throwaway child only
    // exits (a system call, safe in a copy of a multithreaded process).
    const long pid = ::syscall(
        SYS_clone,
        CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | SIGCHLD, nullptr,
        nullptr, nullptr, 0);
    if (pid == 0) ::_exit(0);
    StrictNet net{"namespaces", pid > 0, ""};
    if (pid > 0) {
      int status = 0;
      retry_eintr([&] { return ::waitpid(static_cast<pid_t>(pid), &status, 0); });
      net.how =
          "new user, mount, PID, network and IPC namespaces: the trial sees only its packs "
          "(read-only) and its scratch store, only its own processes, and no network";
    } else {
      net.how =
          "clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | "
          "CLONE_NEWIPC): " +
          errno_text(errno) +
          " (user namespaces disabled? see /proc/sys/user/max_user_namespaces); the "
          "trial would see the host's filesystem, network and processes";
    }
    nets.push_back(std::move(net));
  }
  if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0) {
    nets.push_back({"seccomp", true,
                    "a seccomp-bpf allow-list (libseccomp): any other system call ends the "
                    "trial with SIGSYS, named in its report"});
  } else {
    nets.push_back({"seccomp", false,
                    "prctl(PR_GET_SECCOMP): " + errno_text(errno) +
                        " (a kernel without CONFIG_SECCOMP_FILTER?); system calls would not "
                        "be filtered"});
  }
  if (auto cgroup = probe_trial_cgroups()) {
    nets.push_back({"cgroup", true,
                    *cgroup + ": real memory capped at max_rss_bytes, at most " +
                        std::to_string(kStrictMaxTasks) + " tasks"});
  } else {
    nets.push_back({"cgroup", false,
                    cgroup.error().message +
                        "; real memory and tasks would not be capped (RLIMIT_AS and the seccomp "
                        "filter, which refuses new processes, still apply)"});
  }
  return nets;
}

}  // namespace forktrial::sandbox
