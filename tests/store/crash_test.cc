#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "store/event_store.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace forktrial::store {
namespace {

// Starts the helper with its stdout on a pipe; returns (pid, read end).
std::pair<pid_t, FILE*> spawn_helper(const std::string& store_dir, int batch_size, bool meta_sync) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::string helper = FORKTRIAL_STORE_CRASH_HELPER;
  std::string size = std::to_string(batch_size);
  std::string no_meta_sync = "--no-meta-sync";
  char* argv[] = {helper.data(), const_cast<char*>(store_dir.c_str()), size.data(),
                  meta_sync ? nullptr : no_meta_sync.data(), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  REQUIRE(rc == 0);
  return {pid, ::fdopen(fds[0], "r")};
}

TEST_CASE("SIGKILL in the middle of a long batch keeps exactly the committed batches",
          "[store][crash]") {
  constexpr int kBatch = 2000;
  forktrial::testing::TempDir dir;
  // Both flush modes: the meta page flushed at each commit, or with the next
  // (sync_meta false, the coordinator's); a killed process loses nothing
  // committed in either.
  const bool meta_sync = GENERATE(true, false);
  std::string store_dir = (dir.path() / (meta_sync ? "synced" : "meta-later")).string();
  // Kill after a varying number of committed batches, so the kill lands at
  // different points of a batch or commit.
  for (int kill_after : {1, 3, 6}) {
    auto [pid, out] = spawn_helper(store_dir + std::to_string(kill_after), kBatch, meta_sync);
    unsigned long long reported = 0;
    int lines = 0;
    char line[64];
    while (lines < kill_after && std::fgets(line, sizeof line, out) != nullptr) {
      reported = std::stoull(line);
      ++lines;
    }
    REQUIRE(lines == kill_after);
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    std::fclose(out);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    EventStore store(store_dir + std::to_string(kill_after));
    auto snap = store.snapshot();
    auto run = snap.run(RunId("crash_run"));
    REQUIRE(run);
    INFO("reported head " << reported << ", reopened head " << run->head);
    CHECK(run->head >= reported);
    CHECK(run->head % kBatch == 0);
    auto history = snap.history(*run);
    REQUIRE(history.size() == run->head);
    for (std::size_t i = 0; i < history.size(); ++i) {
      std::string expected = "b" + std::to_string(i / kBatch) + "_" + std::to_string(i % kBatch);
      if (history[i].id.str() != expected || history[i].seq != i + 1) {
        FAIL("event " << i + 1 << " is " << history[i].id.str() << " at seq " << history[i].seq);
      }
    }
    // The store takes new batches after the crash.
    CHECK(store.append(run->id, run->head, NewEvent{EventId("after"), "t", "{}", "now"}) ==
          run->head + 1);
  }
}

}  // namespace
}  // namespace forktrial::store
