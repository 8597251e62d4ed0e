// Walk rules of the bundle/content hash: one test per rejection kind, each
// asserting the exact violation text, plus the pin checks.
#include "pack/bundle_hash.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/temp_dir.h"

using namespace forktrial::pack;
using forktrial::testing::TempDir;

namespace {

WalkViolations violations_of(const std::filesystem::path& root) {
  auto result = hash_tree(root);
  REQUIRE_FALSE(result.has_value());
  return result.error();
}

}  // namespace

TEST_CASE("a symlink to a file is rejected with its target named", "[pack][walk]") {
  TempDir dir;
  dir.write("a.lua", "x");
  std::filesystem::create_symlink("a.lua", dir.path() / "link.lua");
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 1);
  CHECK(v.violations[0].rule == WalkRule::symlink_to_file);
  CHECK(v.violations[0].message() ==
        "link.lua: symlink to file \"a.lua\"; symlinks are not allowed in a pack: copy the file "
        "in [symlink-to-file]");
}

TEST_CASE("a symlink to a directory is rejected and not followed", "[pack][walk]") {
  TempDir dir;
  dir.write("lib/util.lua", "x");
  std::filesystem::create_directory_symlink("lib", dir.path() / "vendor");
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 1);
  CHECK(v.violations[0].message() ==
        "vendor: symlink to directory \"lib\"; symlinks are not allowed in a pack: copy the "
        "directory in [symlink-to-directory]");
}

TEST_CASE("a dangling symlink is rejected", "[pack][walk]") {
  TempDir dir;
  std::filesystem::create_symlink("nowhere", dir.path() / "gone");
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 1);
  CHECK(v.violations[0].message() ==
        "gone: symlink to \"nowhere\" (target missing); symlinks are not allowed in a pack: "
        "remove it [symlink-dangling]");
}

TEST_CASE("a decomposed (NFD) name is rejected with both forms spelled out", "[pack][walk]") {
  TempDir dir;
  dir.write("caf\x65\xcc\x81.lua", "x");  // "cafe" + combining acute accent
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 1);
  CHECK(v.violations[0].rule == WalkRule::non_nfc_path);
  CHECK(v.violations[0].message() ==
        "caf\x65\xcc\x81.lua: path is not NFC-normalized (found \"cafe\\u{0301}.lua\", NFC form "
        "\"caf\\u{00E9}.lua\"); rename it to its NFC form, e.g. with `convmv -f utf8 -t utf8 "
        "--nfc` [non-nfc-path]");
}

TEST_CASE("an invalid UTF-8 name is rejected with the bad byte escaped", "[pack][walk]") {
  TempDir dir;
  dir.write("sub/bad\xff.lua", "x");
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 1);
  CHECK(v.violations[0].rule == WalkRule::non_utf8_path);
  CHECK(v.violations[0].message() ==
        "sub/bad\\xFF.lua: path is not valid UTF-8 (bad byte at offset 7); rename it with a "
        "UTF-8 name [non-utf8-path]");
}

TEST_CASE("an unreadable file is rejected with the errno text", "[pack][walk]") {
  TempDir dir;
  auto file = dir.write("secret.lua", "x");
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(file.c_str(), 0);
  // Permission bits do not stop root, so the walk runs as an unprivileged
  // user in a forked child when the test runs as root.
  std::string message;
  if (::geteuid() == 0) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
      auto result = hash_tree(dir.path());
      std::string text = result ? "hashed" : result.error().violations.at(0).message();
      ssize_t ignored = ::write(fds[1], text.data(), text.size());
      (void)ignored;
      ::_exit(0);
    }
    ::close(fds[1]);
    char buffer[1024];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) message.append(buffer, n);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  } else {
    auto result = hash_tree(dir.path());
    REQUIRE_FALSE(result);
    message = result.error().violations.at(0).message();
  }
  CHECK(message ==
        "secret.lua: cannot open file: Permission denied; fix its permissions or remove it from "
        "the pack [unreadable]");
}

TEST_CASE("a missing root and a root that is a file are reported", "[pack][walk]") {
  TempDir dir;
  auto missing = violations_of(dir.path() / "nope");
  REQUIRE(missing.violations.size() == 1);
  CHECK(missing.violations[0].message() ==
        ".: pack directory does not exist (No such file or directory); check the path "
        "[root-missing]");
  auto file = dir.write("file", "x");
  auto not_dir = violations_of(file);
  REQUIRE(not_dir.violations.size() == 1);
  CHECK(not_dir.violations[0].message() ==
        ".: not a directory; a pack is a directory holding manifest.toml [root-not-directory]");
}

TEST_CASE("every violation of a walk is reported together and sorted by path", "[pack][walk]") {
  TempDir dir;
  dir.write("ok.lua", "x");
  dir.write("z\xc3.lua", "x");
  std::filesystem::create_symlink("ok.lua", dir.path() / "a-link");
  std::filesystem::create_directory(dir.path() / "d");
  std::filesystem::create_directory_symlink("..", dir.path() / "d" / "up");
  auto v = violations_of(dir.path());
  REQUIRE(v.violations.size() == 3);
  CHECK(v.violations[0].path == "a-link");
  CHECK(v.violations[1].path == "d/up");
  CHECK(v.violations[2].path == "z\xc3.lua");
  CHECK(v.message.starts_with("cannot hash pack directory " + dir.path().string() +
                              ": 3 violations of the pack hash rules (nothing was hashed):\n  "
                              "a-link: "));
}

TEST_CASE("hidden entries, __pycache__, .pyc files and fifos are skipped, not rejected",
          "[pack][walk]") {
  TempDir dir;
  dir.write("pack.lua", "x");
  auto before = bundle_hash(dir.path());
  REQUIRE(before);
  dir.write(".git/config", "y");
  dir.write(".hidden", "y");
  dir.write("__pycache__/m.cpython-311.pyc", "y");
  dir.write("mod.pyc", "y");
  std::filesystem::create_symlink("pack.lua", dir.path() / ".hidden-link");
  REQUIRE(::mkfifo((dir.path() / "pipe").c_str(), 0600) == 0);
  auto after = bundle_hash(dir.path());
  REQUIRE(after);
  CHECK(*after == *before);
}

TEST_CASE("content hash ignores only the root manifest.toml", "[pack][walk]") {
  TempDir dir;
  dir.write("pack.lua", "x");
  auto bare = hash_tree(dir.path());
  REQUIRE(bare);
  dir.write("manifest.toml", "[pack]\n");
  auto with_manifest = hash_tree(dir.path());
  REQUIRE(with_manifest);
  CHECK(*with_manifest->content == *bare->content);
  CHECK(*with_manifest->bundle != *bare->bundle);
  CHECK(with_manifest->files == 2);
  dir.write("sub/manifest.toml", "[pack]\n");
  auto nested = hash_tree(dir.path());
  REQUIRE(nested);
  CHECK(*nested->content != *with_manifest->content);
}

TEST_CASE("verify_bundle_hash accepts the right pin and names both hashes on mismatch",
          "[pack][pin]") {
  TempDir dir;
  dir.write("pack.lua", "x");
  auto actual = bundle_hash(dir.path());
  REQUIRE(actual);
  auto ok = verify_bundle_hash(actual->str(), dir.path());
  REQUIRE(ok);
  CHECK(*ok == *actual);

  const std::string wrong = "sha256:" + std::string(64, '0');
  auto mismatch = verify_bundle_hash(wrong, dir.path());
  REQUIRE_FALSE(mismatch);
  CHECK(mismatch.error().kind == PinError::Kind::mismatch);
  CHECK(mismatch.error().message ==
        "bundle hash mismatch for " + dir.path().string() + ": pinned " + wrong +
            " but the directory hashes to " + actual->str() +
            " (the bundle hash covers every file, manifest.toml included); the pack changed "
            "since it was pinned, or the pin belongs to another pack");
}

TEST_CASE("a malformed pin is refused before anything is hashed", "[pack][pin]") {
  TempDir dir;
  auto bad = verify_bundle_hash("md5:abc", dir.path() / "does-not-exist");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == PinError::Kind::malformed_pin);
  CHECK(bad.error().message ==
        "malformed bundle pin \"md5:abc\": it must start with \"sha256:\"; a pin is \"sha256:\" "
        "followed by 64 lowercase hex digits");
  auto upper = verify_bundle_hash("sha256:" + std::string(64, 'A'), dir.path());
  REQUIRE_FALSE(upper);
  CHECK(upper.error().message.find("hex digits must be lowercase") != std::string::npos);
}
