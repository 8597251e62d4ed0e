#include "sandbox/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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

  SpawnActions actions;
  actions.dup2(in.read.get(), 0);
  actions.dup2(out.write.get(), 1);
  actions.dup2(err.write.get(), 2);
  actions.dup2(tail.write.get(), 3);
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

  std::vector<char*> argv{const_cast<char*>(request.program.c_str())};
  for (const auto& arg : request.args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : request.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  // glibc's posix_spawn reports exec failures (ENOENT, EACCES) as its result.
  const int rc = ::posix_spawn(&pid, request.program.c_str(), actions.get(), &attributes,
                               argv.data(), envp.data());
  ::posix_spawnattr_destroy(&attributes);
  if (rc != 0) throw SystemError("posix_spawn(\"" + request.program + "\")", rc);
  ChildHandle child(pid, request.before_group_kill);
  in.read.reset();
  out.write.reset();
  err.write.reset();
  tail.write.reset();

  // Through syscall(2): glibc 2.36's <sys/pidfd.h> lacks C linkage markers.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) throw SystemError("pidfd_open(" + std::to_string(pid) + ")", errno);
  set_nonblocking(in.write.get());

  ChildResult result;
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
