// Running a child process the way a trial needs it: a fresh program image
// (posix_spawn, never a bare fork of the caller), its own process group, a
// closed environment, a job on stdin, a dedicated tail descriptor (fd 3), and
// stdout/stderr captured with a size cap, under a wall-clock deadline that
// kills the whole process group.
//
// The child holds descriptors 0 to 3 and no other: every descriptor of the
// caller from 4 up is closed in the child before exec, close-on-exec or not,
// including those other threads open while it starts.
//
// run_child blocks the calling thread until the child has exited and its
// process group is gone; it is safe to call from several threads at once
// (each call owns its descriptors and child). Memory used is bounded by the
// caps whatever the child writes. It sleeps in poll() between events and
// wakes up idle only when a deadline passes.
//
// The process group is killed only while its leader is unreaped (alive, or a
// zombie that keeps its pid, the group id, from being reused): the exit is
// observed without reaping, the group killed, then the leader reaped. The
// rest of the process must therefore leave trial children alone: no
// waitpid(-1), and SIGCHLD not ignored (run_child refuses to start then).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/cancellation.h"

namespace forktrial::sandbox {

struct SpawnRequest {
  std::string program;                      // absolute path; no PATH search
  std::vector<std::string> args;            // argv[1..]
  std::vector<std::string> env;             // the child's entire environment, "NAME=value"
  std::string stdin_data;                   // written to the child's stdin, then closed
  std::size_t output_cap = 64 << 10;        // bytes kept of stdout and of stderr (the last ones)
  std::size_t tail_cap = 1 << 20;           // bytes kept of fd 3 (the first ones)
  std::chrono::milliseconds wall_clock{0};  // 0: no deadline
  // When set and cancelled, before or during the run, run_child kills the
  // child's group, reaps it and throws Cancelled. Must outlive the call.
  const Cancellation* cancellation = nullptr;
  // Strict isolation's half of the spawn (sandbox/confine.h has the child's):
  // the child starts in new user, mount, PID, network and IPC namespaces,
  // its user and group mapped to the caller's, and joins the cgroup whose
  // cgroup.procs descriptors are given, before exec. Where the host refuses
  // the namespaces it starts without them and ChildResult::warnings says so.
  // Started with clone, not posix_spawn, which cannot make namespaces; a
  // failure before exec is reported over a close-on-exec pipe.
  struct Strict {
    std::vector<int> cgroup_procs;  // not owned; open for the whole call
  };
  std::optional<Strict> strict;
  // Tests only: called with the leader's pid just before each kill of the
  // child's process group, on the calling thread; must not throw.
  std::function<void(pid_t)> before_group_kill;
};

struct ChildResult {
  bool exited = false;  // exited normally; `exit_code` is valid
  int exit_code = -1;
  int signal = 0;                  // the signal that ended it, when !exited
  bool wall_clock_killed = false;  // the deadline passed and the group was killed
  std::string stdout_tail;         // last `output_cap` bytes
  std::string stderr_tail;
  std::size_t stdout_bytes = 0;  // totals the child wrote, including dropped bytes
  std::size_t stderr_bytes = 0;
  std::string tail;            // first `tail_cap` bytes of fd 3
  bool tail_overflow = false;  // the child wrote more than `tail_cap` to fd 3
  std::chrono::milliseconds elapsed{0};
  // Times the supervising poll() returned with nothing ready: once per
  // deadline that passed (the wall clock, the end of draining the output).
  std::size_t idle_wakeups = 0;
  // Strict only: the child ran in its own namespaces (PID 1 of its own), or
  // why not.
  bool in_namespaces = false;
  std::vector<std::string> warnings;
};

// Spawns and supervises the child. Throws Cancelled when the request's
// Cancellation is set before the child starts (none is started) or while it
// is supervised (its group killed and the leader reaped first). Throws
// SystemError when the child cannot be started at all (e.g. the program does
// not exist), naming the program, or when something else reaped it (the
// group is then left alone); throws std::logic_error, before starting
// anything, when SIGCHLD is ignored.
ChildResult run_child(const SpawnRequest& request);

// The closed environment of a trial child: PATH, HOME and LANG from `parent`
// (when set there) plus each name in `passthrough` that is set in `parent`.
// Nothing else crosses.
std::vector<std::string> closed_environment(const std::vector<std::string>& passthrough,
                                            char** parent);

}  // namespace forktrial::sandbox
