#include "store/writer_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace forktrial::store {
namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

TEST_CASE("a store's writer lock is taken once, and a second taker is told who holds it",
          "[store][lock]") {
  forktrial::testing::TempDir dir;
  const auto store = dir.path() / "store";
  CHECK_FALSE(WriterLock::holder(store));  // no lock file yet
  auto first = WriterLock::take(store, "coordinator");
  REQUIRE(first);
  CHECK(first->held());
  const std::string pid = std::to_string(::getpid());
  CHECK(read_all(writer_lock_path(store)).starts_with("pid " + pid + "\nhost "));

  const auto holder = WriterLock::holder(store);
  REQUIRE(holder);
  CHECK(holder->pid == ::getpid());
  CHECK_FALSE(holder->host.empty());
  CHECK_THAT(holder->command, Catch::Contains("store_test"));

  auto second = WriterLock::take(store, "coordinator");
  REQUIRE_FALSE(second);
  CHECK(second.error().code == ErrorCode::unavailable);
  CHECK_THAT(second.error().message,
             Catch::StartsWith("the store " + store.string() +
                               " is in use by another coordinator (pid " + pid + " on ") &&
                 Catch::Contains("store_test") &&
                 Catch::Contains("stop that one first, or give this one another store"));

  // Released with its holder: the next one takes it, and says it is the holder.
  *first = WriterLock();
  CHECK_FALSE(WriterLock::holder(store));
  auto third = WriterLock::take(store, "coordinator");
  REQUIRE(third);
  CHECK(WriterLock::holder(store)->pid == ::getpid());
}

TEST_CASE("a writer lock's holder killed by SIGKILL leaves the store free", "[store][lock]") {
  forktrial::testing::TempDir dir;
  const auto store = dir.path() / "store";
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto lock = WriterLock::take(store, "coordinator");
    const char said = lock ? 'y' : 'n';
    (void)!::write(ready[1], &said, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char said = 0;
  REQUIRE(::read(ready[0], &said, 1) == 1);
  ::close(ready[0]);
  REQUIRE(said == 'y');
  const auto holder = WriterLock::holder(store);
  REQUIRE(holder);
  CHECK(holder->pid == child);
  CHECK_FALSE(WriterLock::take(store, "coordinator"));
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // The kernel dropped the lock with the process; the stale text is
  // overwritten by the next holder.
  CHECK_FALSE(WriterLock::holder(store));
  auto taken = WriterLock::take(store, "coordinator");
  REQUIRE(taken);
  CHECK(WriterLock::holder(store)->pid == ::getpid());
}

TEST_CASE("a lock file's text is read bounded and printable, whoever wrote it", "[store][lock]") {
  forktrial::testing::TempDir dir;
  const auto store = dir.path() / "store";
  auto lock = WriterLock::take(store, "coordinator");
  REQUIRE(lock);
  // Whoever can write the store can write the file: its text reaches a
  // terminal through the refusal.
  {
    std::ofstream file(writer_lock_path(store), std::ios::trunc);
    file << "pid 77\nhost \x1b[2Jevil\ncommand " << std::string(100000, 'x') << "\n";
  }
  const auto holder = WriterLock::holder(store);
  REQUIRE(holder);
  CHECK(holder->pid == 77);
  CHECK(holder->host == "?[2Jevil");
  CHECK(holder->command.size() < 600);
  auto refused = WriterLock::take(store, "coordinator");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find('\x1b') == std::string::npos);
  CHECK(refused.error().message.size() < 1000);
  // A file that names no pid (its holder has not written it yet) is said so.
  { std::ofstream file(writer_lock_path(store), std::ios::trunc); }
  CHECK_THAT(WriterLock::take(store, "coordinator").error().message,
             Catch::Contains("a process that has not said which yet"));
}

}  // namespace
}  // namespace forktrial::store
