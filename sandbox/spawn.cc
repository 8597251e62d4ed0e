#include "sandbox/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include "base/unique_fd.h"

namespace forktrial::sandbox {
namespace {

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe2(O_CLOEXEC)", errno);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw SystemError("fcntl(" + std::to_string(fd) + ", F_SETFL, O_NONBLOCK)", errno);
  }
}

// Keeps the last `cap` bytes of a stream, counting everything.
void keep_last(std::string& sink, std::size_t& total, const char* data, std::size_t size,
               std::size_t cap) {
  total += size;
  if (size >= cap) {
    sink.assign(data + size - cap, cap);
    return;
  }
  sink.append(data, size);
  if (sink.size() > cap) sink.erase(0, sink.size() - cap);
}

// The descriptors a child gets: stdin, stdout, stderr and the tail.
constexpr int kPassedDescriptors = 4;

class SpawnActions {
 public:
  SpawnActions() { ::posix_spawn_file_actions_init(&actions_); }
  ~SpawnActions() { ::posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  void dup2(int from, int to) {
    if (int rc = ::posix_spawn_file_actions_adddup2(&actions_, from, to); rc != 0) {
      throw SystemError("posix_spawn_file_actions_adddup2(" + std::to_string(from) + ", " +
                            std::to_string(to) + ")",
                        rc);
    }
  }
  // Closes every descriptor from `lowest` up in the child, after the dup2s.
  void close_from(int lowest) {
    if (int rc = ::posix_spawn_file_actions_addclosefrom_np(&actions_, lowest); rc != 0) {
      throw SystemError("posix_spawn_file_actions_addclosefrom_np(" + std::to_string(lowest) + ")",
                        rc);
    }
  }
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

// How a child ended, as waitid reports it.
struct ExitStatus {
  bool exited = false;  // exit_code is valid; otherwise it was killed by `signal`
  int exit_code = -1;
  int signal = 0;
};

// Owns a started child, the leader of its own process group.
//
// The group is only ever killed while the leader is unreaped: a zombie
// leader keeps its pid, which is the process-group id, from being reused, so
// kill(-pid) cannot reach an unrelated group. Hence the order, here and in
// run_child: see the exit without reaping (WNOWAIT), kill the group, reap.
// Unless it was reaped, the destructor kills the group and reaps the leader,
// so no error path leaves a runaway behind.
class ChildHandle {
 public:
  ChildHandle(pid_t pid, const std::function<void(pid_t)>& before_group_kill)
      : pid_(pid), before_group_kill_(before_group_kill) {}
  ~ChildHandle() {
    if (pid_ > 0) {
      kill_group();
      reap();
    }
  }
  ChildHandle(const ChildHandle&) = delete;
  ChildHandle& operator=(const ChildHandle&) = delete;

  // The leader's status once it has exited, leaving it a zombie; nullopt
  // while it runs. Throws SystemError when something else in this process
  // reaped it, and then neither kills nor waits for the group any more.
  std::optional<ExitStatus> exit_status() {
    siginfo_t info{};
    const int rc = retry_eintr([&] {
      return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    });
    if (rc != 0) {
      const int error = errno;
      const pid_t lost = std::exchange(pid_, -1);
      throw SystemError("waitid(P_PID, " + std::to_string(lost) +
                            ", WEXITED | WNOHANG | WNOWAIT) for the child (did another waitpid in "
                            "this process reap it?)",
                        error);
    }
    if (info.si_pid == 0) return std::nullopt;
    ExitStatus status;
    status.exited = info.si_code == CLD_EXITED;
    (status.exited ? status.exit_code : status.signal) = info.si_status;
    return status;
  }

  // SIGKILL to the whole group; the leader must not have been reaped yet.
  void kill_group() {
    if (before_group_kill_) before_group_kill_(pid_);
    ::kill(-pid_, SIGKILL);
  }

  // Waits for the leader's exit and reaps it; its pid is free afterwards.
  void reap() {
    siginfo_t info{};
    retry_eintr([&] { return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED); });
    pid_ = -1;
  }

 private:
  pid_t pid_;
  const std::function<void(pid_t)>& before_group_kill_;
};

// Refuses a caller whose SIGCHLD is ignored: the kernel would then reap the
// child the moment it exits, losing its status and freeing its pid, the
// group id, before the group is killed.
void require_children_kept() {
  struct sigaction current {};
  if (::sigaction(SIGCHLD, nullptr, &current) != 0) {
    throw SystemError("sigaction(SIGCHLD, nullptr, &current)", errno);
  }
  if (current.sa_handler == SIG_IGN || (current.sa_flags & SA_NOCLDWAIT) != 0) {
    throw std::logic_error(
        "cannot supervise a child: SIGCHLD is ignored in this process (SIG_IGN or "
        "SA_NOCLDWAIT), so the kernel would reap it at once, losing its exit status and freeing "
        "its process-group id before the group is killed; set SIGCHLD to SIG_DFL or a handler");
  }
}

// Blocks SIGPIPE in the calling thread while it feeds a child's stdin: a
// child that exits without reading its job must cost an EPIPE, not the
// caller's life. A SIGPIPE raised meanwhile is consumed before the previous
// mask is restored. Process-wide dispositions are left alone.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigemptyset(&pending);
    if (::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1 &&
        sigismember(&previous_, SIGPIPE) == 0) {
      const timespec zero{0, 0};
      ::sigtimedwait(&pipe_, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
};

// Starts the child with posix_spawn; its pid.
pid_t start_plain(const std::string& program, const int (&passed)[kPassedDescriptors], char** argv,
                  char** envp) {
  SpawnActions actions;
  for (int to = 0; to < kPassedDescriptors; ++to) actions.dup2(passed[to], to);
  // Nothing else crosses, whether or not it is close-on-exec: the caller's
  // inheritable descriptors, those a library opened without O_CLOEXEC (LMDB's
  // data file), and those other threads open while this child starts.
  actions.close_from(kPassedDescriptors);
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  // Its own process group, so the wall-clock kill reaches every descendant;
  // default signal dispositions, whatever the caller ignores.
  sigset_t all;
  sigfillset(&all);
  ::posix_spawnattr_setsigdefault(&attributes, &all);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attributes, &none);
  ::posix_spawnattr_setpgroup(&attributes, 0);
  ::posix_spawnattr_setflags(
      &attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  // glibc's posix_spawn reports exec failures (ENOENT, EACCES) as its result.
  const int rc = ::posix_spawn(&pid, program.c_str(), actions.get(), &attributes, argv, envp);
  ::posix_spawnattr_destroy(&attributes);
  if (rc != 0) throw SystemError("posix_spawn(\"" + program + "\")", rc);
  return pid;
}

// The strict start, prepared before clone: the child may then only make
// system calls (it is a copy of one thread of a possibly multithreaded
// process), so every string and descriptor is ready beforehand.
struct StrictStart {
  bool namespaces = true;
  std::string uid_map;  // "0 <euid> 1": root inside is the caller outside
  std::string gid_map;
  std::vector<int> cgroup_procs;
  int passed[kPassedDescriptors];  // become 0..3
  int report = -1;                 // the write end of the failure pipe
  const char* program = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
};

// What failed in the child before exec, sent over the failure pipe.
struct StartFailure {
  int step = 0;  // index into kStartSteps
  int error = 0;
};
constexpr const char* kStartSteps[] = {"prctl(PR_SET_PDEATHSIG, SIGKILL)",
                                       "write /proc/self/setgroups",
                                       "write /proc/self/uid_map",
                                       "write /proc/self/gid_map",
                                       "write 0 to the cgroup's cgroup.procs",
                                       "setpgid(0, 0)",
                                       "reset the signal mask",
                                       "dup2 the passed descriptors",
                                       "close_range(4, ~0, CLOSE_RANGE_CLOEXEC)",
                                       "execve"};

bool write_whole(int fd, const char* text, std::size_t size) {
  return retry_eintr([&] { return ::write(fd, text, size); }) == static_cast<ssize_t>(size);
}

bool write_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = write_whole(fd, text.data(), text.size());
  ::close(fd);
  return written;
}

// The child between clone and exec: system calls only.
[[noreturn]] void run_strict_child(const StrictStart& s) {
  int step = 0;
  auto fail = [&] {
    const StartFailure failure{step, errno};
    write_whole(s.report, reinterpret_cast<const char*>(&failure), sizeof failure);
    ::_exit(127);
  };
  // First, so that a parent gone from here on takes the child along: in its
  // own PID namespace it cannot compare its parent's pid any more.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail();
  ++step;
  if (s.namespaces) {
    if (!write_file("/proc/self/setgroups", "deny")) fail();
    ++step;
    if (!write_file("/proc/self/uid_map", s.uid_map)) fail();
    ++step;
    if (!write_file("/proc/self/gid_map", s.gid_map)) fail();
    ++step;
  } else {
    step += 3;
  }
  for (int fd : s.cgroup_procs) {
    if (!write_whole(fd, "0", 1)) fail();
  }
  ++step;
  if (::setpgid(0, 0) != 0) fail();
  ++step;
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  for (int signal = 1; signal < NSIG; ++signal) ::sigaction(signal, &fallback, nullptr);
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail();
  ++step;
  for (int to = 0; to < kPassedDescriptors; ++to) {
    const int from = s.passed[to];
    // dup2 onto itself would keep close-on-exec; clear it instead.
    if (from == to ? ::fcntl(to, F_SETFD, 0) != 0 : ::dup2(from, to) != to) fail();
  }
  ++step;
  // Close-on-exec rather than closed: the failure pipe must stay open until
  // exec, which then closes everything from 4 up at once.
  if (::close_range(kPassedDescriptors, ~0U, CLOSE_RANGE_CLOEXEC) != 0) fail();
  ++step;
  ::execve(s.program, s.argv, s.envp);
  fail();
  ::_exit(127);
}

// Starts the child the strict way; its pid. Namespaces the host refuses are
// a warning in `result`, and the child starts without them.
pid_t start_strict(StrictStart start, ChildResult& result) {
  Pipe report = make_pipe();
  start.report = report.write.get();
  constexpr unsigned long kNamespaces =
      CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC;
  long pid = ::syscall(SYS_clone, kNamespaces | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (pid == 0) run_strict_child(start);
  if (pid < 0 && (errno == EPERM || errno == EINVAL || errno == ENOSPC || errno == EUSERS)) {
    result.warnings.push_back(
        "namespaces unavailable: clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | "
        "CLONE_NEWNET | CLONE_NEWIPC): " +
        errno_text(errno) +
        "; the trial sees the host's filesystem, network and processes as the caller's user "
        "(the seccomp filter and the cgroup still apply where available)");
    start.namespaces = false;
    pid = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (pid == 0) run_strict_child(start);
  }
  if (pid < 0) throw SystemError(std::string("clone for ") + start.program, errno);
  report.write.reset();
  StartFailure failure;
  const ssize_t n =
      retry_eintr([&] { return ::read(report.read.get(), &failure, sizeof failure); });
  if (n == static_cast<ssize_t>(sizeof failure)) {
    siginfo_t info{};
    retry_eintr([&] { return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED); });
    const int step = std::clamp(failure.step, 0, static_cast<int>(std::size(kStartSteps)) - 1);
    throw SystemError(
        std::string("starting ") + start.program + " under strict isolation: " + kStartSteps[step],
        failure.error);
  }
  result.in_namespaces = start.namespaces;
  return static_cast<pid_t>(pid);
}

}  // namespace

std::vector<std::string> closed_environment(const std::vector<std::string>& passthrough,
                                            char** parent) {
  std::vector<std::string> names = {"PATH", "HOME", "LANG"};
  names.insert(names.end(), passthrough.begin(), passthrough.end());
  std::vector<std::string> env;
  for (const auto& name : names) {
    for (char** entry = parent; entry != nullptr && *entry != nullptr; ++entry) {
      std::string_view text = *entry;
      if (text.size() > name.size() && text.starts_with(name) && text[name.size()] == '=') {
        env.emplace_back(text);
        break;
      }
    }
  }
  return env;
}

ChildResult run_child(const SpawnRequest& request) {
  using Clock = std::chrono::steady_clock;
  require_children_kept();
  if (request.cancellation != nullptr && request.cancellation->cancelled()) {
    throw Cancelled("cancelled before " + request.program + " was started");
  }
  const SigpipeBlock no_sigpipe;
  const auto started = Clock::now();
  Pipe in = make_pipe();
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe tail = make_pipe();

  ChildResult result;

  std::vector<char*> argv{const_cast<char*>(request.program.c_str())};
  for (const auto& arg : request.args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : request.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  const int passed[kPassedDescriptors] = {in.read.get(), out.write.get(), err.write.get(),
                                          tail.write.get()};
  pid_t pid = -1;
  if (request.strict) {
    StrictStart start{.uid_map = "0 " + std::to_string(::geteuid()) + " 1",
                      .gid_map = "0 " + std::to_string(::getegid()) + " 1",
                      .cgroup_procs = request.strict->cgroup_procs,
                      .passed = {passed[0], passed[1], passed[2], passed[3]},
                      .program = request.program.c_str(),
                      .argv = argv.data(),
                      .envp = envp.data()};
    pid = start_strict(std::move(start), result);
  } else {
    pid = start_plain(request.program, passed, argv.data(), envp.data());
  }
  ChildHandle child(pid, request.before_group_kill);
  in.read.reset();
  out.write.reset();
  err.write.reset();
  tail.write.reset();

  // Through syscall(2): glibc 2.36's <sys/pidfd.h> lacks C linkage markers.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) throw SystemError("pidfd_open(" + std::to_string(pid) + ")", errno);
  set_nonblocking(in.write.get());

  std::size_t stdin_written = 0;
  if (request.stdin_data.empty()) in.write.reset();
  std::optional<Clock::time_point> deadline;
  if (request.wall_clock.count() > 0) deadline = started + request.wall_clock;
  bool exited = false;
  std::optional<Clock::time_point> drain_until;  // after exit: descendants may hold the pipes
  char buffer[65536];

  for (;;) {
    pollfd fds[6];
    int count = 0;
    auto add = [&](const UniqueFd& fd, short events) {
      if (fd) fds[count++] = {fd.get(), events, 0};
    };
    add(out.read, POLLIN);
    add(err.read, POLLIN);
    add(tail.read, POLLIN);
    add(in.write, POLLOUT);
    if (!exited) add(pidfd, POLLIN);
    // Readable once cancelled, so a cancel() from a signal handler or another
    // thread wakes this poll whenever it comes; checked after every wake-up.
    if (request.cancellation != nullptr) fds[count++] = {request.cancellation->fd(), POLLIN, 0};
    const bool streams_open = out.read || err.read || tail.read;
    if (exited && !streams_open) break;

    // Sleeps until something happens or the next deadline passes, and only
    // then: after the wall-clock kill there is no deadline until the child's
    // exit, however long its death takes. Rounded up, so that a wake-up on
    // time finds the deadline passed instead of polling again for the rest.
    int timeout = -1;
    const auto now = Clock::now();
    auto until = [&](Clock::time_point t) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
      return static_cast<int>(std::clamp<long long>(ms, 0, std::numeric_limits<int>::max()));
    };
    if (deadline && !exited && !result.wall_clock_killed) timeout = until(*deadline);
    if (drain_until) timeout = until(*drain_until);
    const int ready = ::poll(fds, static_cast<nfds_t>(count), timeout);
    if (ready < 0 && errno != EINTR) throw SystemError("poll", errno);
    if (ready == 0) ++result.idle_wakeups;
    if (request.cancellation != nullptr && request.cancellation->cancelled()) {
      if (!exited) {
        child.kill_group();  // unreaped, so the group id is still the child's
        child.reap();
      }
      throw Cancelled("cancelled while supervising " + request.program + " (pid " +
                      std::to_string(pid) + "); its process group was killed");
    }

    if (deadline && !exited && !result.wall_clock_killed && Clock::now() >= *deadline) {
      child.kill_group();  // the leader runs: its pid is still the group's
      result.wall_clock_killed = true;
    }
    if (drain_until && Clock::now() >= *drain_until) break;

    for (int i = 0; i < count && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      if (request.cancellation != nullptr && fd == request.cancellation->fd()) continue;
      if (fd == pidfd.get()) {
        if (auto status = child.exit_status()) {
          // Whatever the child left running in its group dies with it, killed
          // while the zombie leader still holds the group id; then reaped.
          child.kill_group();
          child.reap();
          exited = true;
          result.exited = status->exited;
          result.exit_code = status->exit_code;
          result.signal = status->signal;
          drain_until = Clock::now() + std::chrono::seconds(2);
        }
        continue;
      }
      if (in.write && fd == in.write.get()) {
        ssize_t n = ::write(fd, request.stdin_data.data() + stdin_written,
                            request.stdin_data.size() - stdin_written);
        if (n > 0) stdin_written += static_cast<std::size_t>(n);
        if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
            stdin_written == request.stdin_data.size() || (fds[i].revents & (POLLERR | POLLHUP))) {
          in.write.reset();
        }
        continue;
      }
      ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        if (out.read && fd == out.read.get()) out.read.reset();
        if (err.read && fd == err.read.get()) err.read.reset();
        if (tail.read && fd == tail.read.get()) tail.read.reset();
        continue;
      }
      const auto size = static_cast<std::size_t>(n);
      if (out.read && fd == out.read.get()) {
        keep_last(result.stdout_tail, result.stdout_bytes, buffer, size, request.output_cap);
      } else if (err.read && fd == err.read.get()) {
        keep_last(result.stderr_tail, result.stderr_bytes, buffer, size, request.output_cap);
      } else {
        const std::size_t room = request.tail_cap - std::min(request.tail_cap, result.tail.size());
        result.tail.append(buffer, std::min(room, size));
        if (size > room) result.tail_overflow = true;
      }
    }
  }
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  return result;
}

}  // namespace forktrial::sandbox
