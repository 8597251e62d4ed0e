// The pack archive: round trips against the hash walk, a hand-built known
// answer, one refusal per kind of unsafe or malformed archive (each built by
// hand), and materialize's reuse, repair and concurrency.
#include "pack/bundle_archive.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

using namespace forktrial::pack;
using forktrial::Digest;
using forktrial::ErrorCode;
using forktrial::testing::read_file;
using forktrial::testing::TempDir;
namespace fs = std::filesystem;

namespace {

struct RawFile {
  std::string path;
  std::string content;
};

void put_be(std::string& out, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// An archive written byte by byte as docs/pack-format.md describes it, with
// the file count and sizes as given (so they can lie).
std::string raw_archive(const std::vector<RawFile>& files,
                        std::optional<std::uint64_t> count = {}) {
  std::string out("FTPACK\0\1", 8);
  put_be(out, count.value_or(files.size()), 4);
  for (const RawFile& file : files) {
    put_be(out, file.path.size(), 4);
    out += file.path;
    put_be(out, file.content.size(), 8);
    out += file.content;
  }
  return out;
}

fs::path sample_pack(const TempDir& dir, std::string_view name = "pack") {
  forktrial::testing::PackSpec spec;
  spec.pack_lua = "-- entry\nreturn 1\n";
  spec.files = {{"lib/util.lua", "return {}\n"},
                {"scenarios/smoke.lua", "-- smoke\n"},
                {"data/deep/nested/fixture.json", "{\"a\": 1}\n"},
                {"a-b.txt", "sorts before a/b"},
                {"empty.txt", ""}};
  const fs::path root = forktrial::testing::write_pack(dir, name, spec);
  // Skipped by the walk, so absent from the archive.
  dir.write(std::string(name) + "/.hidden", "secret");
  dir.write(std::string(name) + "/__pycache__/x.pyc", "bytecode");
  return root;
}

PackArchive sample_archive(const TempDir& dir) {
  auto archive = archive_pack(sample_pack(dir));
  REQUIRE(archive.has_value());
  return std::move(*archive);
}

ArchiveError refusal_of(std::string_view bytes, const ArchiveLimits& limits = {}) {
  TempDir dir;
  auto result = extract_archive(bytes, dir.path() / "out", limits);
  REQUIRE_FALSE(result.has_value());
  // Refused before anything was written.
  CHECK_FALSE(fs::exists(dir.path() / "out"));
  auto checked = check_archive(bytes, limits);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().message == result.error().message);
  return result.error();
}

std::string malformed(std::string_view what) {
  return "malformed pack archive: " + std::string(what);
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

ino_t inode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_ino;
}

}  // namespace

TEST_CASE("an archived pack extracts to a tree with the same bundle hash", "[pack][archive]") {
  TempDir dir;
  const fs::path root = sample_pack(dir);
  const auto archive = archive_pack(root);
  REQUIRE(archive.has_value());
  const auto original = bundle_hash(root);
  REQUIRE(original.has_value());
  CHECK(archive->bundle_hash == *original);
  CHECK(archive->files == 7);  // manifest.toml, pack.lua and the five others

  const auto extracted = extract_archive(archive->bytes, dir.path() / "out");
  REQUIRE(extracted.has_value());
  CHECK(extracted->bundle_hash == *original);
  CHECK(extracted->files == 7);
  CHECK(bundle_hash(dir.path() / "out") == *original);
  CHECK(read_file(dir.path() / "out/data/deep/nested/fixture.json") == "{\"a\": 1}\n");
  CHECK(read_file(dir.path() / "out/empty.txt").empty());
  CHECK_FALSE(fs::exists(dir.path() / "out/.hidden"));
  CHECK_FALSE(fs::exists(dir.path() / "out/__pycache__"));

  // Read-only throughout.
  CHECK(mode_of(dir.path() / "out") == 0555);
  CHECK(mode_of(dir.path() / "out/data") == 0555);
  CHECK(mode_of(dir.path() / "out/data/deep/nested") == 0555);
  CHECK(mode_of(dir.path() / "out/pack.lua") == 0444);
  CHECK(mode_of(dir.path() / "out/data/deep/nested/fixture.json") == 0444);
}

TEST_CASE("the same pack always archives to the same bytes", "[pack][archive]") {
  TempDir dir;
  const auto first = archive_pack(sample_pack(dir, "one"));
  const auto again = archive_pack(dir.path() / "one");
  // Another copy: other inodes and times, and an executable bit the hash
  // does not cover.
  const auto copy = archive_pack(sample_pack(dir, "two"));
  fs::permissions(dir.path() / "two/pack.lua", fs::perms::owner_exec, fs::perm_options::add);
  const auto copy_again = archive_pack(dir.path() / "two");
  REQUIRE(first.has_value());
  REQUIRE(again.has_value());
  REQUIRE(copy.has_value());
  REQUIRE(copy_again.has_value());
  CHECK(first->bytes == again->bytes);
  CHECK(first->bytes == copy->bytes);
  CHECK(first->bytes == copy_again->bytes);
}

TEST_CASE("a small pack archives to the documented bytes", "[pack][archive]") {
  TempDir dir;
  dir.write("p/manifest.toml", "m");
  dir.write("p/b/c.lua", "cc");
  dir.write("p/a.lua", "x");
  const auto archive = archive_pack(dir.path() / "p");
  REQUIRE(archive.has_value());
  const std::string expected(
      "FTPACK\0\1"
      "\0\0\0\3"
      "\0\0\0\5a.lua\0\0\0\0\0\0\0\1x"
      "\0\0\0\7b/c.lua\0\0\0\0\0\0\0\2cc"
      "\0\0\0\15manifest.toml\0\0\0\0\0\0\0\1m",
      8 + 4 + (4 + 5 + 8 + 1) + (4 + 7 + 8 + 2) + (4 + 13 + 8 + 1));
  CHECK(archive->bytes == expected);
  CHECK(archive->bytes == raw_archive({{"a.lua", "x"}, {"b/c.lua", "cc"}, {"manifest.toml", "m"}}));
  const auto summary = check_archive(archive->bytes);
  REQUIRE(summary.has_value());
  CHECK(summary->bundle_hash == bundle_hash(dir.path() / "p"));
  CHECK(summary->content_bytes == 4);
}

TEST_CASE("archiving a pack that breaks the walk rules reports its violations", "[pack][archive]") {
  TempDir dir;
  dir.write("p/manifest.toml", "m");
  fs::create_symlink("manifest.toml", dir.path() / "p/link.lua");
  const auto archive = archive_pack(dir.path() / "p");
  REQUIRE_FALSE(archive.has_value());
  CHECK(archive.error().code == ErrorCode::invalid_argument);
  REQUIRE(archive.error().violations.size() == 1);
  CHECK(archive.error().violations[0].rule == WalkRule::symlink_to_file);
}

TEST_CASE("archiving refuses a name the walk allows but an archive may not hold",
          "[pack][archive]") {
  TempDir dir;
  dir.write("p/manifest.toml", "m");
  dir.write("p/win\\dows.lua", "x");
  const auto archive = archive_pack(dir.path() / "p");
  REQUIRE_FALSE(archive.has_value());
  CHECK(archive.error().message == "cannot archive pack directory " + (dir.path() / "p").string() +
                                       ": path \"win\\dows.lua\" contains a backslash; an "
                                       "archive cannot hold it: rename it");
}

TEST_CASE("archiving refuses a pack beyond the limits with the numbers", "[pack][archive]") {
  TempDir dir;
  dir.write("p/manifest.toml", "m");
  dir.write("p/a.lua", "12345");
  const auto files = archive_pack(dir.path() / "p", {.max_files = 1});
  REQUIRE_FALSE(files.has_value());
  CHECK(files.error().code == ErrorCode::resource_exhausted);
  CHECK(files.error().message == "cannot archive pack directory " + (dir.path() / "p").string() +
                                     ": the pack has more than 1 files, the limit of an archive");
  const auto bytes = archive_pack(dir.path() / "p", {.max_total_bytes = 5});
  REQUIRE_FALSE(bytes.has_value());
  CHECK(bytes.error().code == ErrorCode::resource_exhausted);
  CHECK(bytes.error().message ==
        "cannot archive pack directory " + (dir.path() / "p").string() +
            ": the pack's files hold more than 5 bytes (6 up to \"manifest.toml\"), the limit of "
            "an archive");
}

TEST_CASE("an archive path that is unsafe or not the walk's is refused", "[pack][archive]") {
  struct Case {
    std::string path;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/etc/passwd", "path \"/etc/passwd\" is absolute"},
      {"../escape.lua",
       "path \"../escape.lua\" has a \"..\" component, which would leave the pack"},
      {"a/../../b.lua",
       "path \"a/../../b.lua\" has a \"..\" component, which would leave the pack"},
      {"./a.lua", "path \"./a.lua\" has a \".\" component"},
      {"a//b.lua", "path \"a//b.lua\" has an empty component"},
      {"a/", "path \"a/\" has an empty component"},
      {"", "a path is empty"},
      {"a\\b.lua", "path \"a\\b.lua\" contains a backslash"},
      {std::string("a\0b.lua", 7), "path \"a\\x00b.lua\" contains a NUL byte"},
      {".env", "path \".env\" has a component starting with '.', which the hash walk skips"},
      {"__pycache__/m.lua",
       "path \"__pycache__/m.lua\" is inside a __pycache__ directory, which "
       "the hash walk skips"},
      {"m.pyc", "path \"m.pyc\" ends in \".pyc\", which the hash walk skips"},
      {"bad\xff.lua",
       "path \"bad\\xff.lua\": path is not valid UTF-8 (bad byte at offset 3); "
       "rename it with a UTF-8 name"},
      {"cafe\xcc\x81.lua",
       "path \"cafe\xcc\x81.lua\": path is not NFC-normalized (found \"cafe\\u{0301}.lua\", NFC "
       "form \"caf\\u{00E9}.lua\"); rename it to its NFC form, e.g. with `convmv -f utf8 -t utf8 "
       "--nfc`"},
      {std::string(256, 'n'), ""},  // the message cuts the path: checked below
  };
  for (const Case& c : cases) {
    INFO(c.path);
    const ArchiveError error = refusal_of(raw_archive({{c.path, "x"}}));
    CHECK(error.code == ErrorCode::invalid_argument);
    if (c.path.size() == 256) {
      CHECK_THAT(error.message,
                 Catch::EndsWith("\" has a component of 256 bytes; the limit is 255"));
    } else {
      CHECK(error.message == malformed(c.message));
    }
  }
}

TEST_CASE("an archive with a path twice or out of order is refused", "[pack][archive]") {
  CHECK(refusal_of(raw_archive({{"a.lua", "1"}, {"a.lua", "1"}})).message ==
        malformed("path \"a.lua\" appears twice"));
  CHECK(refusal_of(raw_archive({{"b.lua", "1"}, {"a.lua", "1"}})).message ==
        malformed("path \"a.lua\" comes after \"b.lua\"; an archive lists its files sorted by "
                  "their bytes, as the hash walk does"));
}

TEST_CASE("an archive path that is both a file and a directory is refused", "[pack][archive]") {
  // "a" sorts before "a-b" before "a/b": the clash is not adjacent.
  CHECK(refusal_of(raw_archive({{"a", "1"}, {"a-b", "2"}, {"a/b", "3"}})).message ==
        malformed("path \"a/b\" needs directory \"a\", which is a file of the archive"));
  CHECK(refusal_of(raw_archive({{"x/y", "1"}, {"x/y/z", "2"}})).message ==
        malformed("path \"x/y/z\" needs directory \"x/y\", which is a file of the archive"));
}

TEST_CASE("a truncated archive is refused at every cut", "[pack][archive]") {
  const std::string whole = raw_archive({{"a.lua", "abc"}, {"b.lua", "de"}});
  REQUIRE(check_archive(whole).has_value());
  for (std::size_t size = 0; size < whole.size(); ++size) {
    INFO(size);
    const ArchiveError error = refusal_of(whole.substr(0, size));
    CHECK(error.code == ErrorCode::invalid_argument);
    CHECK_THAT(error.message, Catch::StartsWith("malformed pack archive: "));
  }
  CHECK(refusal_of(whole.substr(0, 3)).message ==
        malformed("it does not start with the magic \"FTPACK\\0\""));
  CHECK(refusal_of(whole.substr(0, 10)).message ==
        malformed("the archive ends at byte 8 inside the file count"));
  CHECK(refusal_of(whole.substr(0, whole.size() - 1)).message ==
        malformed("the archive ends at byte 49 inside the 2 bytes of \"b.lua\" (only 1 left)"));
  CHECK(refusal_of(raw_archive({{"a.lua", "abc"}}, 2)).message ==
        malformed("the archive ends at byte 32 inside the path length of file 2 of 2"));
}

TEST_CASE("bytes after the last file are refused", "[pack][archive]") {
  CHECK(refusal_of(raw_archive({{"a.lua", "abc"}}) + "junk").message ==
        malformed("4 bytes follow the last file, from byte 32"));
  CHECK(refusal_of(raw_archive({{"a.lua", "abc"}}, 0)).message ==
        malformed("20 bytes follow the last file, from byte 12"));
}

TEST_CASE("an archive of another magic or version is refused", "[pack][archive]") {
  std::string other = raw_archive({});
  other[0] = 'X';
  CHECK(refusal_of(other).message == malformed("it does not start with the magic \"FTPACK\\0\""));
  std::string newer = raw_archive({});
  newer[7] = 2;
  CHECK(refusal_of(newer).message ==
        malformed("format version 2 is not the version this forktrial reads (1)"));
}

TEST_CASE("archive sizes that overflow or pass the limits are refused with the numbers",
          "[pack][archive]") {
  // A size of 2^64 - 1 must not wrap the running total.
  std::string huge("FTPACK\0\1", 8);
  put_be(huge, 2, 4);
  put_be(huge, 5, 4);
  huge += "a.lua";
  put_be(huge, 1, 8);
  huge += "x";
  put_be(huge, 5, 4);
  huge += "b.lua";
  put_be(huge, ~std::uint64_t{0}, 8);
  huge += "y";
  const ArchiveError overflow = refusal_of(huge);
  CHECK(overflow.code == ErrorCode::resource_exhausted);
  CHECK(overflow.message ==
        "pack archive file \"b.lua\" of 18446744073709551615 bytes takes the archive's content "
        "past the limit of 536870912 bytes (1 before it)");
  // Unbounded totals still cannot read past the end.
  std::string unbounded("FTPACK\0\1", 8);
  put_be(unbounded, 1, 4);
  put_be(unbounded, 5, 4);
  unbounded += "b.lua";
  put_be(unbounded, ~std::uint64_t{0}, 8);
  unbounded += "y";
  CHECK(refusal_of(unbounded, {.max_total_bytes = ~std::uint64_t{0}}).message ==
        malformed("the archive ends at byte 29 inside the 18446744073709551615 bytes of "
                  "\"b.lua\" (only 1 left)"));

  const ArchiveError count = refusal_of(raw_archive({}, 4'000'000'000));
  CHECK(count.code == ErrorCode::resource_exhausted);
  CHECK(count.message == "pack archive holds 4000000000 files; the limit is 10000");

  const ArchiveError total =
      refusal_of(raw_archive({{"a.lua", "123"}, {"b.lua", "456"}}), {.max_total_bytes = 5});
  CHECK(total.code == ErrorCode::resource_exhausted);
  CHECK(total.message ==
        "pack archive file \"b.lua\" of 3 bytes takes the archive's content past the limit of 5 "
        "bytes (3 before it)");

  const ArchiveError path = refusal_of(raw_archive({{std::string(2000, 'p'), "x"}}));
  CHECK(path.message == malformed("the path of file 1 of 1 is 2000 bytes long; the limit is 1024"));
}

TEST_CASE("extraction refuses a target that exists", "[pack][archive]") {
  TempDir dir;
  fs::create_directory(dir.path() / "out");
  const auto result = extract_archive(raw_archive({{"a.lua", "x"}}), dir.path() / "out");
  REQUIRE_FALSE(result.has_value());
  CHECK(result.error().code == ErrorCode::failed_precondition);
  CHECK(fs::is_empty(dir.path() / "out"));
}

TEST_CASE("materialize extracts once and reuses the verified directory", "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const fs::path cache = dir.path() / "cache";
  const auto first = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(first.has_value());
  CHECK(*first == cache / archive.bundle_hash.hex());
  CHECK(bundle_hash(*first) == archive.bundle_hash);
  CHECK(mode_of(*first) == 0555);
  const ino_t inode = inode_of(*first / "pack.lua");

  const auto second = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(second.has_value());
  CHECK(*second == *first);
  CHECK(inode_of(*second / "pack.lua") == inode);  // not rewritten
  // Only the directory and its lock file.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(cache)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names ==
        std::vector<std::string>{archive.bundle_hash.hex(), archive.bundle_hash.hex() + ".lock"});
}

TEST_CASE("dematerialize removes the read-only directory, and materialize makes it again",
          "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const fs::path cache = dir.path() / "cache";
  const auto made = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(made.has_value());
  CHECK(dematerialize(archive.bundle_hash, cache) == std::nullopt);
  CHECK_FALSE(fs::exists(*made));
  CHECK(dematerialize(archive.bundle_hash, cache) == std::nullopt);  // none: nothing to do
  const auto again = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(again.has_value());
  CHECK(bundle_hash(*again) == archive.bundle_hash);
}

TEST_CASE("materialize detects a tampered directory and rebuilds it", "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const fs::path cache = dir.path() / "cache";
  const auto first = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(first.has_value());

  SECTION("a changed file") {
    fs::permissions(*first / "pack.lua", fs::perms::owner_write, fs::perm_options::add);
    { std::ofstream(*first / "pack.lua") << "os.exit(1)\n"; }
  }
  SECTION("a removed file") {
    fs::permissions(*first / "lib", fs::perms::owner_write, fs::perm_options::add);
    fs::remove(*first / "lib/util.lua");
  }
  SECTION("an added symlink") {
    fs::permissions(*first, fs::perms::owner_write, fs::perm_options::add);
    fs::create_symlink("/etc/passwd", *first / "passwd.lua");
  }
  SECTION("a file in place of the directory") {
    fs::permissions(*first, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(*first);
    { std::ofstream(*first) << "not a pack"; }
  }
  REQUIRE(bundle_hash(*first) != archive.bundle_hash);

  const auto again = materialize(archive.bytes, archive.bundle_hash, cache);
  REQUIRE(again.has_value());
  CHECK(*again == *first);
  CHECK(bundle_hash(*again) == archive.bundle_hash);
  CHECK(read_file(*again / "pack.lua") == read_file(dir.path() / "pack/pack.lua"));
  CHECK_FALSE(fs::is_symlink(*again / "passwd.lua"));
}

TEST_CASE("materialize refuses an archive that does not match the expected hash",
          "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const Digest wrong = forktrial::Sha256::of("another pack");
  const auto result = materialize(archive.bytes, wrong, dir.path() / "cache");
  REQUIRE_FALSE(result.has_value());
  CHECK(result.error().code == ErrorCode::failed_precondition);
  CHECK(result.error().message == "the pack archive has bundle hash " + archive.bundle_hash.str() +
                                      ", not the expected " + wrong.str() +
                                      "; it is another pack, or the pin is wrong");
  CHECK_FALSE(fs::exists(dir.path() / "cache" / wrong.hex()));
  CHECK_FALSE(fs::exists(dir.path() / "cache" / archive.bundle_hash.hex()));
}

TEST_CASE("materialize removes a crashed holder's temporary directory", "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const std::string hex = archive.bundle_hash.hex();
  dir.write("cache/.tmp-" + hex + "-99999-1/half.lua", "x");
  dir.write("cache/.tmp-other-1/kept", "x");
  REQUIRE(materialize(archive.bytes, archive.bundle_hash, dir.path() / "cache").has_value());
  CHECK_FALSE(fs::exists(dir.path() / ("cache/.tmp-" + hex + "-99999-1")));
  CHECK(fs::exists(dir.path() / "cache/.tmp-other-1/kept"));
}

TEST_CASE("materialize is safe from concurrent threads and processes", "[pack][archive]") {
  TempDir dir;
  const PackArchive archive = sample_archive(dir);
  const fs::path cache = dir.path() / "cache";
  const fs::path expected = cache / archive.bundle_hash.hex();

  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      bool ok = true;
      for (int round = 0; round < 5 && ok; ++round) {
        const auto result = materialize(archive.bytes, archive.bundle_hash, cache);
        ok = result.has_value() && *result == expected;
      }
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        const auto result = materialize(archive.bytes, archive.bundle_hash, cache);
        if (!result)
          failures[t] = result.error().message;
        else if (*result != expected)
          failures[t] = "returned " + result->string();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (const std::string& failure : failures) CHECK(failure.empty());
  CHECK(bundle_hash(expected) == archive.bundle_hash);
  for (const auto& entry : fs::directory_iterator(cache)) {
    CHECK_FALSE(entry.path().filename().string().starts_with(".tmp-"));
  }
}
