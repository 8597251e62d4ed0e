#include "sandbox/syscall_filter.h"

#include <linux/sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <vector>

#include "base/unique_fd.h"

namespace forktrial::sandbox {
namespace {

// What a trial child calls once it is confined: reading packs and its
// scratch store (files, directories, locks, maps), memory, time, randomness,
// signals, threads and exit. Nothing that makes processes, sockets or
// mounts, changes identity or talks to other processes.
constexpr const char* kAllowed[] = {
    // files and directories (what is reachable is the mount namespace's)
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "lseek",
    "close", "open", "openat", "fstat", "stat", "lstat", "newfstatat", "statx", "fstatfs", "statfs",
    "getdents64", "readlink", "readlinkat", "access", "faccessat", "faccessat2", "getcwd", "mkdir",
    "mkdirat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "ftruncate", "fallocate",
    "fsync", "fdatasync", "msync", "flock", "fcntl", "dup", "dup2", "dup3", "poll", "ppoll",
    // memory
    "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "mincore",
    // signals, threads, exit
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "futex", "set_robust_list",
    "get_robust_list", "rseq", "set_tid_address", "sched_yield", "sched_getaffinity", "exit",
    "exit_group",
    // identity and limits, read-only or lowering
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
    "getresgid", "getrlimit", "prlimit64", "getrusage", "times", "uname",
    // time and randomness
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getrandom"};

// What a confined CPython also calls, from its exec on (install_syscall_filter).
constexpr const char* kExecAllowed[] = {"execve",  "arch_prctl", "chdir",   "fchdir",  "umask",
                                        "sysinfo", "fchown",     "fchmod",  "getpgrp", "getsid",
                                        "pipe2",   "select",     "pselect6"};

#if defined(FORKTRIAL_SANITIZED)
// Builds with a sanitizer (scripts/test's checking passes, with gcc or clang:
// FORKTRIAL_SANITIZED, not a compiler's own macro) also allow what
// its runtime calls inside the child: ASan probes whether memory is readable
// by writing it to a pipe. Release builds, the ones trials run under, do not.
constexpr const char* kSanitizerAllowed[] = {"pipe", "pipe2"};
#endif

// Writes the refusal and dies of SIGSYS: async-signal-safe, and allowed by
// the filter itself (write, tgkill on itself).
void report_refusal(int, siginfo_t* info, void*) {
  char line[128] = "forktrial-child: ";
  std::size_t n = std::strlen(line);
  std::memcpy(line + n, kFilterRefusal.data(), kFilterRefusal.size());
  n += kFilterRefusal.size();
  n = static_cast<std::size_t>(
      std::to_chars(line + n, line + sizeof line - 1, info->si_syscall).ptr - line);
  line[n++] = '\n';
  [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, line, n);
  // SA_RESETHAND restored the default action and SA_NODEFER leaves SIGSYS
  // unblocked: this ends the process.
  ::syscall(SYS_tgkill, ::getpid(), ::syscall(SYS_gettid), SIGSYS);
}

struct FilterDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

std::string seccomp_error(const std::string& call, int rc) {
  return call + ": " + errno_text(-rc);
}

}  // namespace

std::optional<std::string> install_syscall_filter(bool exec) {
  std::unique_ptr<void, FilterDeleter> filter(seccomp_init(SCMP_ACT_TRAP));
  if (!filter) return std::string("seccomp_init(SCMP_ACT_TRAP): failed");
  scmp_filter_ctx ctx = filter.get();
  std::vector<const char*> allowed(std::begin(kAllowed), std::end(kAllowed));
  if (exec) allowed.insert(allowed.end(), std::begin(kExecAllowed), std::end(kExecAllowed));
#if defined(FORKTRIAL_SANITIZED)
  allowed.insert(allowed.end(), std::begin(kSanitizerAllowed), std::end(kSanitizerAllowed));
#endif
  for (const char* name : allowed) {
    const int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) continue;  // not a call of this architecture
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, number, 0); rc != 0) {
      return seccomp_error(std::string("seccomp_rule_add(ALLOW, ") + name + ")", rc);
    }
  }
  const auto self = static_cast<scmp_datum_t>(::getpid());
  struct Rule {
    const char* what;
    std::uint32_t action;
    int number;
    std::optional<scmp_arg_cmp> arg;
  };
  const Rule rules[] = {
      {"clone(CLONE_THREAD)", SCMP_ACT_ALLOW, SCMP_SYS(clone),
       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)},
      {"clone3", SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), std::nullopt},
      {"ioctl(TCGETS)", SCMP_ACT_ALLOW, SCMP_SYS(ioctl), SCMP_A1(SCMP_CMP_EQ, TCGETS)},
      {"ioctl(other)", SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), SCMP_A1(SCMP_CMP_NE, TCGETS)},
      {"tgkill(self)", SCMP_ACT_ALLOW, SCMP_SYS(tgkill), SCMP_A0(SCMP_CMP_EQ, self)},
      // A process signalling itself (CPython's os.kill(os.getpid(), ...)):
      // its pid survives its exec.
      {"kill(self)", SCMP_ACT_ALLOW, SCMP_SYS(kill), SCMP_A0(SCMP_CMP_EQ, self)},
      {"prctl(PR_SET_NAME)", SCMP_ACT_ALLOW, SCMP_SYS(prctl), SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME)},
      {"prctl(PR_GET_NAME)", SCMP_ACT_ALLOW, SCMP_SYS(prctl), SCMP_A0(SCMP_CMP_EQ, PR_GET_NAME)},
  };
  for (const auto& rule : rules) {
    const int rc = rule.arg ? seccomp_rule_add(ctx, rule.action, rule.number, 1, *rule.arg)
                            : seccomp_rule_add(ctx, rule.action, rule.number, 0);
    if (rc != 0) return seccomp_error(std::string("seccomp_rule_add(") + rule.what + ")", rc);
  }

  struct sigaction reporter {};
  reporter.sa_sigaction = report_refusal;
  reporter.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&reporter.sa_mask);
  if (::sigaction(SIGSYS, &reporter, nullptr) != 0) {
    return "sigaction(SIGSYS): " + errno_text(errno);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return "prctl(PR_SET_NO_NEW_PRIVS, 1): " + errno_text(errno);
  }
  if (int rc = seccomp_load(ctx); rc != 0) return seccomp_error("seccomp_load", rc);
  return std::nullopt;
}

std::string syscall_name(int number) {
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, number);
  if (name == nullptr) return "system call " + std::to_string(number);
  std::string text = std::string(name) + " (" + std::to_string(number) + ")";
  std::free(name);
  return text;
}

std::optional<int> refused_syscall(std::string_view stderr_text) {
  const auto at = stderr_text.rfind(kFilterRefusal);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = stderr_text.data() + at + kFilterRefusal.size();
  int number = 0;
  const auto [end, error] = std::from_chars(begin, stderr_text.data() + stderr_text.size(), number);
  if (error != std::errc() || end == begin) return std::nullopt;
  return number;
}

}  // namespace forktrial::sandbox
