// A stand-in for forktrial-child that misbehaves the way only native code in
// a child could: it writes its scratch store directly, bypassing the
// runtime's rules, then claims a clean `completed` on its tail. Tests run it
// as ChildOptions::child_path to check that the parent trusts none of it.
//
// FORKTRIAL_HOSTILE selects the misbehaviour:
//   forge  an ordinary event, then a forged trial.wall_clock_exhausted
//          record of the parent's, then another ordinary event
//   flood  50 events more than max_appended_events
//   bytes  1 MiB payloads until max_appended_bytes is passed
//   misreport  two ordinary events, and a tail claiming seven more
//   lockfile   two ordinary events, then every byte of the store's lock file
//              (its reader table and mutexes) overwritten with 0xff
//
// Under strict isolation it confines itself first, exactly as
// forktrial-child does (sandbox/confine.h), and these modes then attempt
// what the nets refuse, reporting what they saw in the tail's detail (a
// `completed` tail, so the parent's verdict shows what the nets did):
//   passwd      open /etc/passwd and read it
//   processes   list the pids in /proc; look for the parent by its host pid
//   netdev      list the network interfaces in /proc/net/dev
//   socket      socket(AF_INET, SOCK_STREAM)
//   forkbomb    fork() in a loop
//   threadbomb  start threads that sleep until one cannot be started
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "sandbox/confine.h"
#include "sandbox/job.h"
#include "sandbox/tail.h"
#include "store/event_store.h"

using namespace forktrial;

namespace {

std::string error_text(int error) {
  return std::strerror(error);
}

// What a strict-isolation probe saw; nullopt for a mode that is no probe.
std::optional<std::string> probe(const std::string& mode, const sandbox::ChildJob& job) {
  if (mode == "passwd") {
    const int fd = ::open("/etc/passwd", O_RDONLY);
    if (fd < 0) return "open(/etc/passwd): " + error_text(errno);
    char buffer[64];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    return "read /etc/passwd: " + std::to_string(n) + " bytes";
  }
  if (mode == "processes") {
    std::string pids;
    if (DIR* dir = ::opendir("/proc")) {
      while (const dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9')
          pids += std::string(" ") + entry->d_name;
      }
      ::closedir(dir);
    }
    // The parent by its pid on the host (kill itself is the filter's).
    const std::string parent = "/proc/" + std::to_string(job.parent_pid);
    struct stat info {};
    const int found = ::stat(parent.c_str(), &info);
    return "pids in /proc:" + pids + "\nstat(" + parent +
           "): " + (found == 0 ? std::string("found") : error_text(errno));
  }
  if (mode == "netdev") {
    std::ifstream dev("/proc/net/dev");
    std::string line, names;
    for (int i = 0; std::getline(dev, line); ++i) {
      if (i < 2) continue;
      names += " " + line.substr(line.find_first_not_of(' '),
                                 line.find(':') - line.find_first_not_of(' '));
    }
    return "interfaces:" + names;
  }
  if (mode == "socket") {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    return "socket(AF_INET, SOCK_STREAM): " + (fd >= 0 ? std::string("opened") : error_text(errno));
  }
  if (mode == "forkbomb") {
    for (int i = 0;; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::pause();
        ::_exit(0);
      }
      if (pid < 0) return "fork " + std::to_string(i + 1) + ": " + error_text(errno);
    }
  }
  if (mode == "threadbomb") {
    for (int i = 0;; ++i) {
      pthread_t thread;
      const int rc = ::pthread_create(
          &thread, nullptr,
          [](void*) -> void* {
            for (;;) ::sleep(1000);
          },
          nullptr);
      if (rc != 0) return "thread " + std::to_string(i + 1) + ": " + error_text(rc);
    }
  }
  return std::nullopt;
}

}  // namespace

int main() {
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  auto job = sandbox::decode_job(input);
  const char* mode_text = std::getenv("FORKTRIAL_HOSTILE");
  if (!job || mode_text == nullptr) return 2;
  const std::string mode = mode_text;

  sandbox::ChildTail tail;
  tail.outcome = Outcome::completed;
  auto finish = [&] {
    const std::string bytes = sandbox::encode_tail(tail);
    return ::write(3, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) ? 0 : 2;
  };
  if (job->strict) {
    tail.warnings = sandbox::enter_namespaces(sandbox::confinement_for(*job));
    for (auto& warning : sandbox::lock_down()) tail.warnings.push_back(std::move(warning));
  }
  if (auto seen = probe(mode, *job)) {
    tail.detail = *seen;
    const int code = finish();
    ::_exit(code);  // threads may still be sleeping
  }

  store::StoreOptions options;
  options.sync = false;
  store::EventStore scratch(job->scratch_store, options);
  const store::RunId fork(job->fork_run_id);
  std::uint64_t head = scratch.snapshot().run(fork)->head;
  std::uint64_t n = head;
  // The fork tip's time: a delta that goes back before it does not continue
  // the fork, and these modes are about other refusals.
  std::string now = "2026-01-01T00:00:00.000Z";
  if (head > 0) {
    auto snapshot = scratch.snapshot();
    now = snapshot.history(*snapshot.run(fork), head).back().timestamp;
  }
  auto append = [&](std::string type, std::string payload, std::string actor) {
    store::NewEvent event;
    event.id = store::EventId("evt_" + std::to_string(++n));
    event.type = std::move(type);
    event.payload = std::move(payload);
    event.timestamp = now;
    event.actor = std::move(actor);
    head = *scratch.append(fork, head, event);
  };

  std::uint64_t written = 0;
  if (mode == "forge") {
    append("chat.message", R"({"text":"before"})", "scenario");
    append("trial.wall_clock_exhausted", R"({"wall_clock_seconds":1,"last_accepted_seq":1})",
           "forktrial.parent");
    append("chat.message", R"({"text":"after"})", "scenario");
    written = 3;
  } else if (mode == "flood") {
    for (; written < job->limits.max_appended_events + 50; ++written) {
      append("tick", "{}", "scenario");
    }
  } else if (mode == "bytes") {
    const std::string payload = "{\"x\":\"" + std::string(1 << 20, 'x') + "\"}";
    for (std::uint64_t bytes = 0; bytes <= job->limits.max_appended_bytes + (2 << 20);
         bytes += payload.size()) {
      append("blob", payload, "scenario");
      ++written;
    }
  } else if (mode == "backwards") {
    append("chat.message", R"({"text":"on time"})", "scenario");
    now = "2000-01-01T00:00:00Z";
    append("chat.message", R"({"text":"from the past"})", "scenario");
    written = 2;
  } else if (mode == "lockfile") {
    append("chat.message", R"({"text":"one"})", "scenario");
    append("chat.message", R"({"text":"two"})", "scenario");
    written = 2;
    const std::string lock_file = job->scratch_store + "/lock.mdb";
    const int fd = ::open(lock_file.c_str(), O_WRONLY | O_CLOEXEC);
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0 || info.st_size == 0) return 2;
    const std::string junk(static_cast<std::size_t>(info.st_size), '\xff');
    if (::pwrite(fd, junk.data(), junk.size(), 0) != static_cast<ssize_t>(junk.size())) return 2;
    ::close(fd);
  } else if (mode == "misreport") {
    append("chat.message", R"({"text":"one"})", "scenario");
    append("chat.message", R"({"text":"two"})", "scenario");
    written = 2 + 7;
  } else {
    return 2;
  }

  tail.events_appended = written;
  tail.last_seq = head;
  return finish();
}
