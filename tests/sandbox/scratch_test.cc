#include "sandbox/scratch.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <optional>

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
