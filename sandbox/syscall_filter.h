// The strict isolation's seccomp-bpf filter (built with libseccomp): an
// allow-list of the system calls a trial child needs to read its packs, run
// Lua, append to its LMDB scratch store and write its tail.
//
// Default action: SCMP_ACT_TRAP. A call outside the list is not executed;
// the kernel raises SIGSYS with the call's number, the handler installed
// here writes "forktrial-child: the strict filter refused system call N" on
// stderr and the process dies of SIGSYS. The parent names the call in the
// trial's report (syscall_name). Trap rather than EPERM, so that a refused
// call never turns into a silent change of behaviour; rather than
// SCMP_ACT_KILL_PROCESS, whose death carries no call number. A handler the
// trial installs itself only sees the refusal: the call still did not run.
//
// Two calls get an errno instead: clone3 fails with ENOSYS, so that glibc
// falls back to clone, whose flags a filter can see (clone is allowed for
// threads only: CLONE_THREAD set; a new process traps); and ioctl other than
// TCGETS (isatty) fails with ENOTTY.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace forktrial::sandbox {

// What the SIGSYS handler writes on stderr before the number.
inline constexpr std::string_view kFilterRefusal = "the strict filter refused system call ";

// Sets no_new_privs, installs the SIGSYS reporter and loads the filter into
// this process (and the threads it starts later). The error names the
// failing call and errno; nothing is loaded then.
// `exec` widens the list as far as a confined CPython needs to start and
// run activegraph's child against an SQLite store (kExecAllowed in the
// source): execve, arch_prctl, kill of itself, chdir, umask, sysinfo,
// fchown and fchmod (SQLite matches its journal's owner when running as
// root). Processes, sockets and mounts stay refused.
std::optional<std::string> install_syscall_filter(bool exec = false);

// "socket (41)" for the native architecture's number 41; "system call 999"
// for a number libseccomp does not know.
std::string syscall_name(int number);

// The number the last refusal line in `stderr_text` names, if any.
std::optional<int> refused_syscall(std::string_view stderr_text);

}  // namespace forktrial::sandbox
