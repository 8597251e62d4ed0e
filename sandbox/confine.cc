#include "sandbox/confine.h"

#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "base/unique_fd.h"
#include "sandbox/syscall_filter.h"

namespace forktrial::sandbox {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& path) {
  return "\"" + path + "\"";
}

// mkdir -p of `path` below `root`; the error names the directory.
std::optional<std::string> make_dirs(const fs::path& root, const fs::path& path) {
  fs::path at = root;
  for (const auto& part : path.relative_path()) {
    at /= part;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      return "mkdir(" + quoted(at.string()) + "): " + errno_text(errno);
    }
  }
  return std::nullopt;
}

// The flags a remount of a bind of `source` must keep: in a user namespace
// the kernel refuses to clear the nosuid, nodev, noexec and atime flags the
// source mount was locked with.
unsigned long locked_flags(const std::string& source) {
  struct statvfs info {};
  if (::statvfs(source.c_str(), &info) != 0) return 0;
  unsigned long flags = 0;
  if (info.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (info.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (info.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (info.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (info.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (info.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

std::optional<std::string> bind(const fs::path& root, const std::string& source, bool read_only) {
  const std::string target = (root / fs::path(source).relative_path()).string();
  if (auto failed = make_dirs(root, fs::path(source))) return failed;
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return "mount(" + quoted(source) + ", " + quoted(target) + ", MS_BIND): " + errno_text(errno);
  }
  if (read_only && ::mount(nullptr, target.c_str(), nullptr,
                           MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(source), nullptr) != 0) {
    return "mount(" + quoted(target) + ", MS_REMOUNT | MS_BIND | MS_RDONLY): " + errno_text(errno);
  }
  return std::nullopt;
}

// Step 1's mounts, up to and including the pivot; the first failure.
std::optional<std::string> build_root(const Confinement& c) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return "mount(\"/\", MS_REC | MS_PRIVATE): " + errno_text(errno);
  }
  const fs::path root = c.new_root;
  if (::mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    return "mount(tmpfs, " + quoted(root.string()) + "): " + errno_text(errno);
  }
  for (const auto& dir : c.read_only) {
    if (auto failed = bind(root, dir, true)) return failed;
  }
  for (const auto& dir : c.writable) {
    if (auto failed = bind(root, dir, false)) return failed;
  }
  // The working directory stays the same path, so paths relative to it
  // (packs given as examples/packs/x) still resolve once the root changed.
  std::error_code ignored;
  const fs::path cwd = fs::current_path(ignored);
  if (!cwd.empty()) {
    if (auto failed = make_dirs(root, cwd)) return failed;
  }
  if (auto failed = make_dirs(root, "/proc")) return failed;
  if (::mount("proc", (root / "proc").c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
      0) {
    return "mount(proc, " + quoted((root / "proc").string()) + "): " + errno_text(errno);
  }
  // pivot_root(".", ".") stacks the old root under the new one at "/";
  // detaching it leaves only the new root.
  if (::chdir(root.c_str()) != 0)
    return "chdir(" + quoted(root.string()) + "): " + errno_text(errno);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) {
    return "pivot_root(" + quoted(root.string()) + "): " + errno_text(errno);
  }
  if (::umount2(".", MNT_DETACH) != 0) return "umount2(old root, MNT_DETACH): " + errno_text(errno);
  if (::chdir(cwd.empty() ? "/" : cwd.c_str()) != 0) {
    return "chdir(" + quoted(cwd.string()) + "): " + errno_text(errno);
  }
  return std::nullopt;
}

// The namespace's init: waits for the trial (reaping whatever else it
// inherits) and ends as it did. Holds none of the trial's streams, so the
// parent sees them close when the trial is done.
[[noreturn]] void be_init(pid_t trial) {
  for (int fd = 0; fd <= 3; ++fd) ::close(fd);
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) ::_exit(70);
    if (pid != trial) continue;
    if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) ::_exit(kSignalExitBase + WTERMSIG(status));
  }
}

}  // namespace

Confinement confinement_for(const ChildJob& job) {
  Confinement c;
  c.new_root = job.strict_root;
  if (job.spec) {
    for (const PackSource* pack : packs_in_load_order(*job.spec)) {
      c.read_only.push_back(fs::absolute(pack->root_dir).lexically_normal().string());
    }
  }
  for (const auto& dir : job.exec_read_only) {
    c.read_only.push_back(fs::absolute(dir).lexically_normal().string());
  }
  if (!job.scratch_store.empty()) {
    c.writable.push_back(fs::absolute(job.scratch_store).lexically_normal().string());
  }
  return c;
}

bool in_strict_namespaces() {
  return ::getpid() == 1;
}

std::vector<std::string> enter_namespaces(const Confinement& confinement) {
  std::vector<std::string> warnings;
  if (!in_strict_namespaces()) return warnings;
  if (auto failed = build_root(confinement)) {
    warnings.push_back("filesystem net degraded: " + *failed +
                       "; the trial can read what the caller's user can (it still has its own "
                       "network, PID and IPC namespaces)");
  } else if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                     nullptr) != 0) {
    warnings.push_back("filesystem net degraded: mount(\"/\", MS_REMOUNT | MS_RDONLY): " +
                       errno_text(errno) + "; the trial can write its (1 MiB) root tmpfs");
  }
  const pid_t trial = ::fork();
  if (trial < 0) {
    warnings.push_back("PID namespace init: fork: " + errno_text(errno) +
                       "; the trial runs as PID 1, which ignores SIGXCPU (the CPU net's hard "
                       "limit still kills it)");
    return warnings;
  }
  if (trial > 0) be_init(trial);
  // The trial dies with its init (the namespace dies with it in any case).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  return warnings;
}

std::vector<std::string> lock_down(bool exec) {
  std::vector<std::string> warnings;
  // In its user namespace the child holds every capability over what the
  // namespace owns; outside one (the host lacks them), a root caller's.
  // Neither is for the trial.
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, none) != 0) {
    warnings.push_back("privileges not dropped: capset(0): " + errno_text(errno));
  }
  if (auto failed = install_syscall_filter(exec)) {
    warnings.push_back("seccomp net unavailable: " + *failed +
                       "; the trial's system calls are not filtered");
  }
  return warnings;
}

}  // namespace forktrial::sandbox
