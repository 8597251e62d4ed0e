#include "sandbox/scratch.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/event_store.h"
#include "tests/sandbox/dir_listing.h"
#include "tests/support/temp_dir.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using forktrial::testing::names_in;
using forktrial::testing::TempDir;

namespace {

// Takes the lock a scratch directory's owner holds, without waiting: whether
// it was free. The lock is released again when `held` goes.
bool lock_free(const std::filesystem::path& dir, std::optional<UniqueFd>* held = nullptr) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw SystemError("open(" + dir.string() + ")", errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return false;
  if (held != nullptr) held->emplace(std::move(fd));
  return true;
}

// Fills `dir` (created) as a trial fills its scratch directory: store/data.mdb.
std::filesystem::path holding_a_store(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "store");
  std::ofstream(dir / "store" / "data.mdb") << "events";
  return dir;
}

// A directory in `parent` as a dead owner leaves it.
std::filesystem::path abandoned(const std::filesystem::path& parent, const std::string& name) {
  return holding_a_store(parent / name);
}

void age(const std::filesystem::path& path, std::chrono::seconds by) {
  const timespec times[2] = {{::time(nullptr) - by.count(), 0}, {::time(nullptr) - by.count(), 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("a scratch directory is named, held locked and removed with its contents",
          "[sandbox][scratch]") {
  TempDir dir;
  std::filesystem::path path;
  {
    ScratchDir scratch(dir.path());
    path = scratch.path();
    CHECK(path.parent_path() == dir.path());
    const std::string name = path.filename().string();
    CHECK(name.starts_with("forktrial-scratch-"));
    CHECK(name.size() == std::string("forktrial-scratch-").size() + 6);
    CHECK(names_in(dir.path()) == std::vector<std::string>{name});  // no hidden one left
    CHECK_FALSE(lock_free(path));
    holding_a_store(path);
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(names_in(dir.path()) == std::vector<std::string>{});
}

TEST_CASE("a scratch directory goes even where its child took away permissions",
          "[sandbox][scratch]") {
  TempDir dir;
  std::filesystem::path path;
  {
    ScratchDir scratch(dir.path());
    path = holding_a_store(scratch.path());
    std::filesystem::permissions(path / "store", std::filesystem::perms::none);
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a sweep removes scratch directories whose owner is gone and keeps the others",
          "[sandbox][scratch]") {
  TempDir dir;
  const auto parent = dir.path() / "tmp";
  std::filesystem::create_directory(parent);
  ScratchDir live(parent);  // made first: making one sweeps
  const auto dead = abandoned(parent, "forktrial-scratch-dead01");
  abandoned(parent, "forktrial-scratch-toolong1");  // not a scratch name
  abandoned(parent, "forktrial-trial-old001");      // an unlocking version's: maybe in use
  abandoned(parent, "unrelated");
  const auto held = abandoned(parent, "forktrial-scratch-held01");
  std::optional<UniqueFd> lock;
  REQUIRE(lock_free(held, &lock));
  const auto outside = abandoned(dir.path(), "outside");
  std::filesystem::create_directory_symlink(outside, parent / "forktrial-scratch-link01");

  Sweep sweep = sweep_scratch_dirs(parent);
  CHECK(sweep.removed == std::vector<std::filesystem::path>{dead});
  CHECK(sweep.problems == std::vector<std::string>{});
  std::vector<std::string> kept = {"forktrial-scratch-held01",      "forktrial-scratch-link01",
                                   "forktrial-scratch-toolong1",    "forktrial-trial-old001",
                                   live.path().filename().string(), "unrelated"};
  std::sort(kept.begin(), kept.end());
  CHECK(names_in(parent) == kept);
  CHECK(std::filesystem::exists(outside / "store" / "data.mdb"));  // a link is never followed
}

TEST_CASE("a hidden scratch directory is swept only when it is older than a minute",
          "[sandbox][scratch]") {
  TempDir dir;
  const auto fresh = dir.path() / ".forktrial-scratch-fresh1";
  const auto stale = dir.path() / ".forktrial-scratch-stale1";
  std::filesystem::create_directory(fresh);
  std::filesystem::create_directory(stale);
  age(fresh, std::chrono::seconds(30));
  age(stale, std::chrono::seconds(90));
  Sweep sweep = sweep_scratch_dirs(dir.path());
  CHECK(sweep.removed == std::vector<std::filesystem::path>{stale});
  CHECK(names_in(dir.path()) == std::vector<std::string>{".forktrial-scratch-fresh1"});
}

TEST_CASE("creating a scratch directory sweeps its parent first", "[sandbox][scratch]") {
  TempDir dir;
  abandoned(dir.path(), "forktrial-scratch-dead01");
  ScratchDir scratch(dir.path());
  CHECK(names_in(dir.path()) == std::vector<std::string>{scratch.path().filename().string()});
}

TEST_CASE("a sweep of a directory that cannot be read is one problem naming it",
          "[sandbox][scratch]") {
  TempDir dir;
  Sweep sweep = sweep_scratch_dirs(dir.path() / "missing");
  CHECK(sweep.removed.empty());
  REQUIRE(sweep.problems.size() == 1);
  CHECK(sweep.problems[0].starts_with("cannot read " + (dir.path() / "missing").string()));
  CHECK_THROWS_WITH(ScratchDir(dir.path() / "missing"),
                    Catch::StartsWith("mkdtemp(\"" + (dir.path() / "missing").string()));
}

namespace {

using Names = std::vector<std::string>;

std::uintmax_t size_of(const std::filesystem::path& file) {
  return std::filesystem::file_size(file);
}

// A child's use of its scratch store: a run holding an event only it knows.
void child_writes(const std::filesystem::path& store_path) {
  store::StoreOptions options;
  options.sync = false;
  options.initial_map_size = std::size_t{1} << 20;
  store::EventStore scratch(store_path, options);
  const store::RunId run("run_secret");
  REQUIRE(scratch.create_run(store::NewRun{.id = run}));
  REQUIRE(scratch.append(
      run, 0,
      store::NewEvent{store::EventId("evt_secret"), "secret.kept",
                      R"({"text":"only this trial knows"})", "2026-01-01T00:00:00Z"}));
}

}  // namespace

TEST_CASE("a pooled scratch directory comes back empty, so no lease sees an earlier one's store",
          "[sandbox][scratch]") {
  TempDir dir;
  ScratchPool pool(dir.path());
  CHECK(names_in(dir.path()).empty());  // nothing is made before the first lease
  std::filesystem::path first;
  {
    auto lease = pool.lease();
    first = lease.path();
    CHECK(lease.store_path() == first / "store");
    CHECK(names_in(lease.store_path()) == Names{"data.mdb", "lock.mdb"});
    CHECK(size_of(lease.store_path() / "data.mdb") == 0);
    child_writes(lease.store_path());
    CHECK(size_of(lease.store_path() / "data.mdb") > 0);
    CHECK(pool.idle() == 0);
  }
  // Reset as soon as it is given back: nothing of the store stays on disk.
  CHECK(pool.idle() == 1);
  CHECK(size_of(first / "store" / "data.mdb") == 0);
  CHECK(size_of(first / "store" / "lock.mdb") == 0);
  CHECK_FALSE(lock_free(first));  // still held by the pool
  {
    auto lease = pool.lease();
    CHECK(lease.path() == first);
    CHECK(names_in(first) == Names{"store"});
    CHECK(names_in(lease.store_path()) == Names{"data.mdb", "lock.mdb"});
    store::StoreOptions options;
    options.exclusive = true;
    store::EventStore fresh(lease.store_path(), options);
    CHECK_FALSE(fresh.snapshot().run(store::RunId("run_secret")));
  }
  CHECK(pool.discarded() == 0);
  // Two leases at once get two directories; both are kept.
  {
    auto a = pool.lease();
    auto b = pool.lease();
    CHECK(a.path() != b.path());
  }
  CHECK(pool.idle() == 2);
}

TEST_CASE("a pooled scratch directory its child changed is discarded, not leased again",
          "[sandbox][scratch]") {
  using Change = std::function<void(const std::filesystem::path& scratch)>;
  const std::vector<std::pair<std::string, Change>> changes = {
      {"a file left in the scratch directory",
       [](const auto& s) { std::ofstream(s / "note") << "for the next trial"; }},
      {"a file left in the store directory",
       [](const auto& s) { std::ofstream(s / "store" / "note") << "for the next trial"; }},
      {"the data file replaced by a link to another file",
       [](const auto& s) {
         std::ofstream(s.parent_path().parent_path() / "elsewhere") << "x";
         std::filesystem::remove(s / "store" / "data.mdb");
         std::filesystem::create_symlink(s.parent_path().parent_path() / "elsewhere",
                                         s / "store" / "data.mdb");
       }},
      {"the data file replaced by another file",
       [](const auto& s) {
         std::ofstream(s / "store" / "other") << "x";
         std::filesystem::rename(s / "store" / "other", s / "store" / "data.mdb");
       }},
      {"a second name for the data file, outside",
       [](const auto& s) {
         std::filesystem::create_hard_link(s / "store" / "data.mdb",
                                           s.parent_path().parent_path() / "kept");
       }},
      {"the lock file's mode changed",
       [](const auto& s) {
         std::filesystem::permissions(s / "store" / "lock.mdb", std::filesystem::perms::all);
       }},
      {"the store directory replaced",
       [](const auto& s) {
         std::filesystem::rename(s / "store", s.parent_path().parent_path() / "moved-store");
         std::filesystem::create_directories(s / "store");
       }},
      {"the scratch directory moved away",
       [](const auto& s) {
         std::filesystem::rename(s, s.parent_path().parent_path() / "moved-scratch");
       }},
      {"an extended attribute on the scratch directory",
       [](const auto& s) {
         if (::setxattr(s.c_str(), "user.note", "x", 1, 0) != 0) {
           std::ofstream(s / "note") << "x";
         }
       }},
      {"an extended attribute on the store directory",
       [](const auto& s) {
         if (::setxattr((s / "store").c_str(), "user.note", "x", 1, 0) != 0) {
           // A file system without user attributes: make the change another way.
           std::ofstream(s / "store" / "note") << "x";
         }
       }},
  };
  for (const auto& [what, change] : changes) {
    INFO(what);
    for (const bool while_idle : {false, true}) {
      INFO((while_idle ? "changed while idle" : "changed during its lease"));
      TempDir dir;
      const auto parent = dir.path() / "pool";
      std::filesystem::create_directories(parent);
      ScratchPool pool(parent);
      std::filesystem::path path;
      {
        auto lease = pool.lease();
        path = lease.path();
        if (!while_idle) change(path);
      }
      if (while_idle) {
        CHECK(pool.idle() == 1);
        change(path);
      }
      auto next = pool.lease();
      CHECK(next.path() != path);
      CHECK(pool.discarded() == 1);
      CHECK(pool.idle() == 0);
      // What was at its name went with it.
      CHECK_FALSE(std::filesystem::exists(path));
      CHECK(names_in(parent) == Names{next.path().filename().string()});
    }
  }
}

TEST_CASE("a pooled scratch directory written while idle is discarded", "[sandbox][scratch]") {
  TempDir dir;
  ScratchPool pool(dir.path());
  std::filesystem::path path;
  { path = pool.lease().path(); }
  // Through the same inode, as a process that outlived its trial could.
  std::ofstream(path / "store" / "data.mdb", std::ios::app) << "left over";
  auto next = pool.lease();
  CHECK(next.path() != path);
  CHECK(pool.discarded() == 1);
}
