#include "sandbox/spawn.h"

#include <fcntl.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/unique_fd.h"
#include "tests/sandbox/child_probe.h"
#include "tests/support/temp_dir.h"

using namespace forktrial::sandbox;
using namespace std::chrono_literals;

namespace {

SpawnRequest shell(const std::string& script) {
  SpawnRequest request;
  request.program = "/bin/sh";
  request.args = {"-c", script};
  request.env = {"PATH=/usr/bin:/bin"};
  return request;
}

SpawnRequest probe(std::vector<std::string> args = {}) {
  SpawnRequest request;
  request.program = FORKTRIAL_CHILD_PROBE;
  request.args = std::move(args);
  return request;
}

// The descriptor numbers a probe child held.
std::string probed_descriptors(const ChildResult& result) {
  return forktrial::testing::descriptor_numbers(
      forktrial::testing::parse_descriptor_listing(result.stdout_tail));
}

}  // namespace

TEST_CASE("the child gets its job on stdin and its streams are kept apart", "[sandbox][spawn]") {
  auto request = shell("cat; echo oops >&2; printf 'the tail' >&3; exit 7");
  request.stdin_data = "job bytes";
  auto result = run_child(request);
  CHECK(result.exited);
  CHECK(result.exit_code == 7);
  CHECK(result.stdout_tail == "job bytes");
  CHECK(result.stderr_tail == "oops\n");
  CHECK(result.tail == "the tail");
  CHECK_FALSE(result.tail_overflow);
  CHECK_FALSE(result.wall_clock_killed);
  CHECK(result.idle_wakeups == 0);
}

TEST_CASE("a signal death keeps its signal", "[sandbox][spawn]") {
  auto result = run_child(shell("kill -SEGV $$"));
  CHECK_FALSE(result.exited);
  CHECK(result.signal == SIGSEGV);
}

TEST_CASE("a flood of output is capped, counted, and cannot pose as the tail", "[sandbox][spawn]") {
  auto request = shell(
      "head -c 20000000 /dev/zero; head -c 3000000 /dev/zero >&2; "
      "printf 'OUTCOME completed' ; head -c 5000 /dev/zero >&3");
  request.output_cap = 4096;
  request.tail_cap = 1000;
  auto result = run_child(request);
  CHECK(result.exit_code == 0);
  CHECK(result.stdout_bytes == 20000000 + 17);
  CHECK(result.stdout_tail.size() == 4096);
  CHECK(result.stdout_tail.ends_with("OUTCOME completed"));
  CHECK(result.stderr_bytes == 3000000);
  CHECK(result.stderr_tail.size() == 4096);
  CHECK(result.tail.size() == 1000);
  CHECK(result.tail_overflow);
}

TEST_CASE("only the closed allow-list and named pass-through variables cross", "[sandbox][spawn]") {
  std::vector<std::string> parent_env = {"PATH=/bin",    "HOME=/root", "OPENAI_API_KEY=sk-secret",
                                         "LANG=C.UTF-8", "TZ=UTC",     "PATHX=no"};
  std::vector<char*> raw;
  for (auto& entry : parent_env) raw.push_back(entry.data());
  raw.push_back(nullptr);
  CHECK(closed_environment({}, raw.data()) ==
        std::vector<std::string>{"PATH=/bin", "HOME=/root", "LANG=C.UTF-8"});
  CHECK(closed_environment({"TZ", "UNSET"}, raw.data()) ==
        std::vector<std::string>{"PATH=/bin", "HOME=/root", "LANG=C.UTF-8", "TZ=UTC"});

  auto request = shell("env | sort");
  request.env = closed_environment({"TZ"}, raw.data());
  auto result = run_child(request);
  CHECK(result.stdout_tail.find("OPENAI_API_KEY") == std::string::npos);
  CHECK(result.stdout_tail.find("TZ=UTC\n") != std::string::npos);
}

TEST_CASE("a program that cannot start is an error naming it", "[sandbox][spawn]") {
  SpawnRequest request;
  request.program = "/nonexistent/forktrial-child";
  try {
    run_child(request);
    FAIL("run_child returned");
  } catch (const forktrial::SystemError& e) {
    CHECK(std::string(e.what()) ==
          "posix_spawn(\"/nonexistent/forktrial-child\"): No such file or directory");
  }
}

TEST_CASE("a child that exits without reading its job costs an EPIPE, not the caller",
          "[sandbox][spawn]") {
  auto request = shell("exit 4");
  request.stdin_data = std::string(4 << 20, 'j');  // far more than a pipe buffer
  auto result = run_child(request);
  CHECK(result.exited);
  CHECK(result.exit_code == 4);
  sigset_t pending;
  sigemptyset(&pending);
  REQUIRE(::sigpending(&pending) == 0);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
}

TEST_CASE("a child holds only descriptors 0 to 3 whatever the caller leaves inheritable",
          "[sandbox][spawn]") {
  // Descriptors without FD_CLOEXEC, one low and one far above the others.
  forktrial::UniqueFd low(::open("/dev/null", O_RDONLY));
  REQUIRE(low);
  forktrial::UniqueFd high(::fcntl(low.get(), F_DUPFD, 900));
  REQUIRE(high.get() >= 900);
  auto result = run_child(probe());
  REQUIRE(result.exit_code == 0);
  const auto held = forktrial::testing::parse_descriptor_listing(result.stdout_tail);
  CHECK(forktrial::testing::descriptor_numbers(held) == "0 1 2 3");
  for (const auto& [fd, target] : held) {
    INFO("fd " << fd << " -> " << target);
    CHECK(target.starts_with("pipe:"));
  }
}

TEST_CASE("a descriptor another thread opens while children start is never inherited",
          "[sandbox][spawn]") {
  // The other thread always holds at least one descriptor without
  // FD_CLOEXEC, and keeps replacing it while the children start.
  struct Opener {
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
      forktrial::UniqueFd held(::open("/dev/null", O_RDONLY));
      while (!stop.load()) held = forktrial::UniqueFd(::open("/dev/null", O_RDONLY));
    }};
    ~Opener() {
      stop = true;
      thread.join();
    }
  };
  std::vector<std::string> seen;
  {
    Opener opener;
    for (int i = 0; i < 20; ++i) seen.push_back(probed_descriptors(run_child(probe())));
  }
  CHECK(seen == std::vector<std::string>(20, "0 1 2 3"));
}

namespace {

// The state letter of /proc/<pid>/stat ('Z' for a zombie, 'S' sleeping), or
// '-' when there is no such process.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '-';
  const auto close = line.rfind(')');  // the command name may hold spaces
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

}  // namespace

TEST_CASE("the group is killed while its exited leader is still unreaped", "[sandbox][spawn]") {
  auto request = shell("exit 5");
  std::vector<char> states;
  request.before_group_kill = [&](pid_t leader) { states.push_back(process_state(leader)); };
  auto result = run_child(request);
  CHECK(result.exit_code == 5);
  CHECK(states == std::vector<char>{'Z'});  // a zombie still holds the process-group id
}

TEST_CASE("the wall clock kills the whole process group", "[sandbox][spawn]") {
  // The leader prints the pid of a member of its group, then waits on it;
  // killing the leader alone would leave that member running.
  auto request = shell("sleep 60 & echo $!; wait; echo never");
  request.wall_clock = 300ms;
  auto result = run_child(request);
  CHECK(result.wall_clock_killed);
  CHECK_FALSE(result.exited);
  CHECK(result.signal == SIGKILL);
  REQUIRE(result.stdout_tail.ends_with("\n"));
  CHECK(result.stdout_tail.find("never") == std::string::npos);
  const pid_t member = std::stoi(result.stdout_tail);
  // Killed: gone, or a zombie not yet reaped by its new parent. SIGKILL went
  // to the whole group; the member may take a moment to die.
  const auto dead = [&] { return process_state(member) == '-' || process_state(member) == 'Z'; };
  bool gone = dead();
  for (int i = 0; i < 100 && !gone; ++i) {
    std::this_thread::sleep_for(100ms);
    gone = dead();
  }
  CHECK(gone);
  if (!gone) ::kill(member, SIGKILL);
}

TEST_CASE("a wall-clock kill and the kill after it both find the leader unreaped",
          "[sandbox][spawn]") {
  auto request = shell("sleep 60");
  request.wall_clock = 200ms;
  std::vector<char> states;
  request.before_group_kill = [&](pid_t leader) { states.push_back(process_state(leader)); };
  auto result = run_child(request);
  CHECK(result.wall_clock_killed);
  CHECK(result.signal == SIGKILL);
  // Running or asleep at the deadline, then a zombie once it died.
  REQUIRE(states.size() == 2);
  CHECK(states[0] != '-');
  CHECK(states[0] != 'Z');
  CHECK(states[1] == 'Z');
}

TEST_CASE("after a wall-clock kill the supervisor sleeps until the child is gone",
          "[sandbox][spawn]") {
  // A large address space makes the killed child take a while to die; a
  // supervisor polling without a timeout meanwhile would wake up idle again
  // and again. Only the deadline itself may wake it up with nothing to do.
  auto request = probe({"hold", "256"});
  request.wall_clock = 500ms;
  auto result = run_child(request);
  CHECK(result.wall_clock_killed);
  CHECK(result.signal == SIGKILL);
  CHECK(result.idle_wakeups == 1);
}

TEST_CASE("a caller that ignores SIGCHLD is refused before any child starts", "[sandbox][spawn]") {
  // With SIGCHLD ignored the kernel reaps children at once: their status is
  // lost and their pid, the group id, is free for reuse before the group kill.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction previous {};
  REQUIRE(::sigaction(SIGCHLD, &ignore, &previous) == 0);
  struct Restore {
    struct sigaction action;
    ~Restore() { ::sigaction(SIGCHLD, &action, nullptr); }
  } restore{previous};
  CHECK_THROWS_WITH(run_child(shell("exit 0")),
                    Catch::Contains("SIGCHLD is ignored") && Catch::Contains("SIG_DFL"));
}

TEST_CASE("a cancellation set before the call starts no child", "[sandbox][spawn]") {
  forktrial::testing::TempDir dir;
  Cancellation cancellation;
  cancellation.cancel();
  auto request = shell("touch " + (dir.path() / "started").string());
  request.cancellation = &cancellation;
  CHECK_THROWS_AS(run_child(request), Cancelled);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "started"));
}

TEST_CASE("cancelling from another thread kills the group, reaps the leader, then throws",
          "[sandbox][spawn]") {
  forktrial::testing::TempDir dir;
  const auto member_pid = dir.path() / "member";
  // The leader waits on a group member; no deadline would ever end them.
  auto request = shell("sleep 60 & echo $! > " + member_pid.string() + ".tmp; mv " +
                       member_pid.string() + ".tmp " + member_pid.string() + "; wait");
  Cancellation cancellation;
  request.cancellation = &cancellation;
  std::vector<char> states;
  request.before_group_kill = [&](pid_t leader) { states.push_back(process_state(leader)); };
  std::thread canceller([&] {
    for (int i = 0; i < 400 && !std::filesystem::exists(member_pid); ++i) ::usleep(25'000);
    cancellation.cancel();
  });
  CHECK_THROWS_WITH(run_child(request), Catch::StartsWith("cancelled while supervising /bin/sh"));
  canceller.join();
  REQUIRE(states.size() == 1);
  CHECK(states[0] != '-');  // the leader was not reaped before its group was killed
  std::ifstream in(member_pid);
  pid_t member = 0;
  REQUIRE(in >> member);
  char state = process_state(member);
  for (int i = 0; i < 400 && state != '-' && state != 'Z'; ++i) {  // dying takes a moment
    ::usleep(25'000);
    state = process_state(member);
  }
  CHECK((state == '-' || state == 'Z'));
}
