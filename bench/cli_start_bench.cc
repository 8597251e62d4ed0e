// The start of the command-line client: what `forktrial status` and
// `forktrial submit` cost a script or a cluster manager that runs them,
// against a bare posix_spawn of /bin/true, in the same run.
//
// Each command runs against a real coordinator the benchmark starts (on an
// ipc:// endpoint in a private directory, its store holding the example chat
// run): a coordinator that answers, so that the figures are those of a
// command doing its whole work (start, connect, ask, print), and not of one
// left waiting for a timeout against an endpoint where nothing listens. No
// worker joins, so the submitted jobs stay queued and the coordinator's work
// per question stays the same. What is counted is the client's alone: the
// CPU time (user + system, every thread) wait4 reports for the child, and
// the wall time from spawn to reap, which includes the coordinator's answer.
//
// The commands timed, interleaved round by round so that a busy machine
// weighs on each alike:
//   /bin/true                the floor: a fresh process that does nothing;
//   forktrial --version      the front end's start alone;
//   forktrial status --help  its start with the status command's options
//                            built and parsed: all but talking to the
//                            coordinator;
//   forktrial status JOB     a job's progress, asked of the coordinator
//                            (ZeroMQ's context and its two threads, the
//                            connection, a hello and the question);
//   forktrial submit         a one-trial batch (its pack hashed and
//                            archived; the bundle uploaded the first time);
//   forktrial-full status    the same question from the program with every
//                            command, as `forktrial status` ran before the
//                            front end ran it itself.
// It prints each one's median and its ratio to /bin/true's; the target is
// status and submit within 2x of /bin/true's CPU time.
//
// usage: cli_start_bench [--runs N]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kTarget = 2.0;

struct Cost {
  double cpu_ms = 0;   // user + system of the child
  double wall_ms = 0;  // spawn to reap
  int status = 0;      // wait4's
};

// Runs `argv` with stdin, stderr and stdout (or `out`) on /dev/null and
// waits for it.
Cost run(const std::vector<std::string>& argv, const char* out = "/dev/null") {
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd <= 2; ++fd) {
    ::posix_spawn_file_actions_addopen(&actions, fd, fd == 1 ? out : "/dev/null",
                                       fd == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  const auto start = Clock::now();
  pid_t pid = 0;
  const int error = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    std::fprintf(stderr, "cli_start_bench: posix_spawn(%s): %s\n", args[0], std::strerror(error));
    std::exit(1);
  }
  Cost cost;
  rusage usage{};
  while (::wait4(pid, &cost.status, 0, &usage) < 0 && errno == EINTR) {
  }
  cost.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  cost.cpu_ms = ms(usage.ru_utime) + ms(usage.ru_stime);
  return cost;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Subject {
  const char* name;
  std::vector<std::string> argv;
  std::vector<double> cpu;
  std::vector<double> wall;
};

// Runs `argv` once and ends the benchmark with its name if it fails: a
// figure of a command that failed would measure the failure.
void run_or_die(const char* name, const std::vector<std::string>& argv,
                const char* out = "/dev/null") {
  if (const Cost cost = run(argv, out); !WIFEXITED(cost.status) || WEXITSTATUS(cost.status) != 0) {
    std::string line;
    for (const auto& arg : argv) line += " " + arg;
    std::fprintf(stderr, "cli_start_bench: %s failed (wait status %d):%s\n", name, cost.status,
                 line.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: cli_start_bench [--runs N]\n");
      return 2;
    }
  }
  const std::string front_end = FORKTRIAL_BINARY;
  const std::string full = FORKTRIAL_FULL_FOR_BENCH;
  const std::string source = FORKTRIAL_SOURCE_DIR;

  std::string pattern = (fs::temp_directory_path() / "cli-start-bench-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "cli_start_bench: mkdtemp(%s): %s\n", pattern.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const fs::path dir = pattern;
  const std::string store = (dir / "store").string();
  const std::string endpoint = "ipc://" + (dir / "coordinator.sock").string();
  const std::string batch = (dir / "one.toml").string();
  std::ofstream(batch) << "name = \"one\"\nrun = \"run_chat\"\nat = [\"evt_009\"]\n"
                       << "[[candidates]]\npack = \"" << source << "/examples/packs/chat_echo\"\n"
                       << "[[scenarios]]\nfile = \"scenarios/replay.lua\"\n";
  run_or_die("run import", {full, "run", "import", source + "/examples/runs/chat.jsonl", "--store",
                            store, "--id", "run_chat"});

  // The coordinator, until the end of the benchmark; --commit-window 0 so
  // that a submission's answer does not wait for others to share its commit.
  pid_t coordinator = 0;
  {
    std::vector<std::string> command = {
        full,          "coordinator", "--store",         store, "--listen", endpoint,
        "--log-level", "error",       "--commit-window", "0"};
    std::vector<char*> args;
    for (auto& arg : command) args.push_back(arg.data());
    args.push_back(nullptr);
    if (const int error =
            ::posix_spawn(&coordinator, args[0], nullptr, nullptr, args.data(), environ)) {
      std::fprintf(stderr, "cli_start_bench: posix_spawn(%s): %s\n", args[0], std::strerror(error));
      return 1;
    }
  }
  struct Cleanup {
    pid_t coordinator;
    fs::path dir;
    ~Cleanup() {
      ::kill(coordinator, SIGTERM);
      int status = 0;
      ::waitpid(coordinator, &status, 0);
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{coordinator, dir};
  for (int i = 0;; ++i) {
    const Cost cost = run({front_end, "status", "--coordinator", endpoint});
    if (WIFEXITED(cost.status) && WEXITSTATUS(cost.status) == 0) break;
    if (i == 300) {
      std::fprintf(stderr, "cli_start_bench: the coordinator did not answer in 30 s\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // One job, whose status is asked: the list of every job would grow with
  // each submission measured.
  const std::string submit_out = (dir / "submitted").string();
  run_or_die("submit", {front_end, "submit", batch, "--coordinator", endpoint}, submit_out.c_str());
  std::string job;
  std::getline(std::ifstream(submit_out), job);
  const std::vector<std::string> status_args = {"status", job, "--coordinator", endpoint};

  std::vector<Subject> subjects = {
      {"/bin/true", {"/bin/true"}, {}, {}},
      {"forktrial --version", {front_end, "--version"}, {}, {}},
      {"forktrial status --help", {front_end, "status", "--help"}, {}, {}},
      {"forktrial status", {front_end}, {}, {}},
      {"forktrial submit", {front_end, "submit", batch, "--coordinator", endpoint}, {}, {}},
      {"forktrial-full status", {full}, {}, {}},
  };
  for (auto* subject : {&subjects[3], &subjects[5]}) {
    subject->argv.insert(subject->argv.end(), status_args.begin(), status_args.end());
  }
  // A warm-up round (page cache, the first upload of the bundle), then the
  // rounds measured.
  for (auto& subject : subjects) run_or_die(subject.name, subject.argv);
  for (int round = 0; round < runs; ++round) {
    for (auto& subject : subjects) {
      const Cost cost = run(subject.argv);
      if (!WIFEXITED(cost.status) || WEXITSTATUS(cost.status) != 0) {
        std::fprintf(stderr, "cli_start_bench: %s failed (wait status %d)\n", subject.name,
                     cost.status);
        return 1;
      }
      subject.cpu.push_back(cost.cpu_ms);
      subject.wall.push_back(cost.wall_ms);
    }
  }

  const double true_cpu = median(subjects[0].cpu);
  const double true_wall = median(subjects[0].wall);
  std::printf(
      "command-line client start (%d runs each, interleaved; medians; the child's CPU "
      "from wait4, user + system)\n",
      runs);
  std::printf("  %-24s %9s %8s %9s %8s\n", "", "CPU ms", "x true", "wall ms", "x true");
  for (const auto& subject : subjects) {
    const double cpu = median(subject.cpu);
    const double wall = median(subject.wall);
    std::printf("  %-24s %9.2f %7.2fx %9.2f %7.2fx\n", subject.name, cpu, cpu / true_cpu, wall,
                wall / true_wall);
  }
  const double status_ratio = median(subjects[3].cpu) / true_cpu;
  const double submit_ratio = median(subjects[4].cpu) / true_cpu;
  const double start_ratio = median(subjects[2].cpu) / true_cpu;
  std::printf(
      "  target: status and submit CPU <= %.1fx /bin/true's: status %.2fx, submit %.2fx: "
      "%s\n",
      kTarget, status_ratio, submit_ratio,
      status_ratio <= kTarget && submit_ratio <= kTarget ? "met" : "NOT MET");
  std::printf("  the start alone (status --help): %.2fx: %s\n", start_ratio,
              start_ratio <= kTarget ? "met" : "NOT MET");
  return 0;
}
