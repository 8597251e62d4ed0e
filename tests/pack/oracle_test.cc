// The pack hashes checked against an independent oracle: for every generated
// tree, the `forktrial pack hash` command and the library's hash_tree must give
// exactly what tests/pack/hash_oracle.py (written from the §4 description
// alone) gives. Known-answer vectors computed by hand pin the format itself,
// so a misreading shared by both implementations cannot pass.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/digest.h"
#include "pack/bundle_hash.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using forktrial::Sha256;
using forktrial::pack::WalkRule;
using forktrial::testing::run_command;
using forktrial::testing::TempDir;

constexpr const char* kOracle = FORKTRIAL_SOURCE_DIR "/tests/pack/hash_oracle.py";
constexpr const char* kEmptyDigest =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Hashes {
  std::string bundle;
  std::string content;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};

// One §4 record, built by hand: path, NUL, 8-byte big-endian length, content.
std::string record(std::string_view path, std::string_view content) {
  std::string out(path);
  out.push_back('\0');
  const std::uint64_t size = content.size();
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((size >> shift) & 0xff));
  }
  out.append(content);
  return out;
}

// The digest of `files` fed in the order given (the caller states the order).
std::string digest_of_records(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string stream;
  for (const auto& [path, content] : files) stream += record(path, content);
  return Sha256::of(stream).str();
}

std::string pseudo_random_bytes(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::string out(size, '\0');
  for (std::size_t i = 0; i < size; i += 8) {
    const std::uint64_t word = generator();
    std::memcpy(out.data() + i, &word, std::min<std::size_t>(8, size - i));
  }
  return out;
}

Hashes oracle_hashes(const fs::path& dir) {
  const auto result = run_command({"python3", kOracle, dir.string()});
  INFO("oracle stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  const auto json = nlohmann::json::parse(result.out);
  return {json.at("bundle_hash").get<std::string>(), json.at("content_hash").get<std::string>(),
          json.at("files").get<std::uint64_t>(), json.at("bytes").get<std::uint64_t>()};
}

// Checks the library and the command line against the oracle on `dir` and
// returns the agreed hashes.
Hashes agreed_hashes(const fs::path& dir) {
  const Hashes want = oracle_hashes(dir);
  INFO("tree: " << dir.string());

  const auto tree = forktrial::pack::hash_tree(dir);
  INFO("library violations: " << (tree ? std::string() : tree.error().message));
  REQUIRE(tree.has_value());
  REQUIRE(tree->bundle.has_value());
  REQUIRE(tree->content.has_value());
  CHECK(tree->bundle->str() == want.bundle);
  CHECK(tree->content->str() == want.content);
  CHECK(tree->files == want.files);
  CHECK(tree->bytes == want.bytes);

  const auto bundle = forktrial::pack::bundle_hash(dir);
  REQUIRE(bundle.has_value());
  CHECK(bundle->str() == want.bundle);
  const auto content = forktrial::pack::content_hash(dir);
  REQUIRE(content.has_value());
  CHECK(content->str() == want.content);

  const auto plain = run_command({FORKTRIAL_BINARY, "pack", "hash", dir.string()});
  INFO("forktrial pack hash stderr: " << plain.err);
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == want.bundle + "\n");

  const auto content_only =
      run_command({FORKTRIAL_BINARY, "pack", "hash", dir.string(), "--content"});
  INFO("forktrial pack hash --content stderr: " << content_only.err);
  CHECK(content_only.exit_code == 0);
  CHECK(content_only.out == want.content + "\n");

  const auto as_json = run_command({FORKTRIAL_BINARY, "pack", "hash", dir.string(), "--json"});
  INFO("forktrial pack hash --json stderr: " << as_json.err);
  CHECK(as_json.exit_code == 0);
  const auto json = nlohmann::json::parse(as_json.out);
  CHECK(json.at("bundle_hash").get<std::string>() == want.bundle);
  CHECK(json.at("content_hash").get<std::string>() == want.content);
  CHECK(json.at("files").get<std::uint64_t>() == want.files);
  CHECK(json.at("bytes").get<std::uint64_t>() == want.bytes);
  CHECK(json.contains("path"));
  return want;
}

// The oracle's name for each rule, so the library's verdicts can be compared
// with the oracle's without relying on the library's own spelling.
std::string oracle_rule_name(WalkRule rule) {
  switch (rule) {
    case WalkRule::root_missing:
      return "root-missing";
    case WalkRule::root_not_directory:
      return "root-not-directory";
    case WalkRule::symlink_to_file:
      return "symlink-to-file";
    case WalkRule::symlink_to_directory:
      return "symlink-to-directory";
    case WalkRule::symlink_dangling:
      return "symlink-dangling";
    case WalkRule::non_utf8_path:
      return "non-utf8-path";
    case WalkRule::non_nfc_path:
      return "non-nfc-path";
    case WalkRule::unreadable:
      return "unreadable";
  }
  return "unknown";
}

using Verdicts = std::multimap<std::string, std::string>;  // rule -> escaped path

// Escapes like the oracle: printable ASCII except '\' as is, others as \xNN.
std::string escaped(std::string_view path) {
  std::string out;
  for (const unsigned char c : path) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

Verdicts oracle_verdicts(const fs::path& dir) {
  const auto result = run_command({"python3", kOracle, dir.string()});
  INFO("oracle stderr: " << result.err);
  REQUIRE(result.exit_code == 1);
  REQUIRE(result.out.empty());
  Verdicts verdicts;
  std::size_t start = 0;
  while (start < result.err.size()) {
    std::size_t end = result.err.find('\n', start);
    if (end == std::string::npos) end = result.err.size();
    const std::string line = result.err.substr(start, end - start);
    const auto open = line.rfind(" [");
    const auto colon = line.find(": ");
    REQUIRE(open != std::string::npos);
    REQUIRE(colon != std::string::npos);
    REQUIRE(line.back() == ']');
    verdicts.emplace(line.substr(open + 2, line.size() - open - 3), line.substr(0, colon));
    start = end + 1;
  }
  return verdicts;
}

// Checks that the oracle, the library and the command line all reject `dir`,
// with the same violations, and that the command prints each one.
void check_rejected(const fs::path& dir, const Verdicts& expected) {
  INFO("tree: " << dir.string());
  CHECK(oracle_verdicts(dir) == expected);

  const auto tree = forktrial::pack::hash_tree(dir);
  REQUIRE_FALSE(tree.has_value());
  Verdicts library;
  for (const auto& violation : tree.error().violations) {
    library.emplace(oracle_rule_name(violation.rule), escaped(violation.path));
  }
  CHECK(library == expected);
  CHECK_FALSE(forktrial::pack::bundle_hash(dir).has_value());
  CHECK_FALSE(forktrial::pack::content_hash(dir).has_value());

  for (const char* flag : {"--content", "--json"}) {
    const auto result = run_command({FORKTRIAL_BINARY, "pack", "hash", dir.string(), flag});
    INFO("forktrial pack hash " << flag << " stderr: " << result.err);
    CHECK(result.exit_code != 0);
    CHECK(result.out.empty());
    for (const auto& violation : tree.error().violations) {
      CHECK(result.err.find(violation.message()) != std::string::npos);
    }
  }
}

void make_fifo(const fs::path& path) {
  fs::create_directories(path.parent_path());
  if (::mkfifo(path.c_str(), 0644) != 0) {
    throw std::runtime_error("mkfifo " + path.string() + ": " + std::strerror(errno));
  }
}

void make_socket(const fs::path& path) {
  fs::create_directories(path.parent_path());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.string().size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  ::close(fd);
  REQUIRE(rc == 0);
}

}  // namespace

TEST_CASE("oracle: a one-file tree hashes to the hand-computed known answer", "[pack][oracle]") {
  TempDir dir;
  dir.write("a", "x");
  // sha256(b"a\0" + (1).to_bytes(8, "big") + b"x"), computed outside forktrial.
  const std::string known =
      "sha256:d111bd52b5b0762b90ad7eee406879b07483b5f90f397270da284f6b377ff2f6";
  CHECK(digest_of_records({{"a", "x"}}) == known);
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.bundle == known);
  CHECK(hashes.content == known);
  CHECK(hashes.files == 1);
  CHECK(hashes.bytes == 1);
}

TEST_CASE("oracle: the root manifest.toml is in the bundle hash only (known answer)",
          "[pack][oracle]") {
  TempDir dir;
  dir.write("a", "x");
  dir.write("manifest.toml", "m");
  const std::string content =
      "sha256:d111bd52b5b0762b90ad7eee406879b07483b5f90f397270da284f6b377ff2f6";
  const std::string bundle =
      "sha256:968d46499b5749349c24fe1ff84a6017305ee820dd99b64aef1120899e6b84a0";
  CHECK(digest_of_records({{"a", "x"}, {"manifest.toml", "m"}}) == bundle);
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.content == content);
  CHECK(hashes.bundle == bundle);
  CHECK(hashes.files == 2);
  CHECK(hashes.bytes == 2);
}

TEST_CASE("oracle: an empty tree hashes to the digest of no input", "[pack][oracle]") {
  TempDir dir;
  SECTION("no entries at all") {}
  SECTION("only empty directories") {
    fs::create_directories(dir.path() / "a" / "b" / "c");
    fs::create_directories(dir.path() / "d");
  }
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.bundle == kEmptyDigest);
  CHECK(hashes.content == kEmptyDigest);
  CHECK(hashes.files == 0);
  CHECK(hashes.bytes == 0);
}

TEST_CASE("oracle: nested directories, including empty ones", "[pack][oracle]") {
  TempDir dir;
  dir.write("manifest.toml", "[pack]\nname = \"nested\"\n");
  dir.write("pack.lua", "return forktrial.pack{}\n");
  dir.write("lib/util.lua", "return {}\n");
  dir.write("lib/deep/er/still/leaf.lua", "-- leaf\n");
  dir.write("lib/deep/er/sibling.txt", "sibling\n");
  dir.write("data/one.json", "{\"n\": 1}\n");
  dir.write("data/two.json", "{\"n\": 2}\n");
  fs::create_directories(dir.path() / "lib" / "empty");
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.files == 7);
  CHECK(hashes.bundle != hashes.content);

  // Moving a file to another directory changes the hash even with equal bytes.
  fs::rename(dir.path() / "data" / "two.json", dir.path() / "lib" / "two.json");
  CHECK(agreed_hashes(dir.path()).bundle != hashes.bundle);
}

TEST_CASE("oracle: paths sort by their UTF-8 bytes, not per directory or as UTF-16",
          "[pack][oracle]") {
  // The order below is the UTF-8 byte order of the whole relative path:
  // "a-b" (0x2d) < "a.txt" (0x2e) < "a/…" (0x2f) < "ab" (0x62), so a walk that
  // sorts each directory's names would put "a/…" first; uppercase (0x41..)
  // before lowercase; "z" (0x7a) before "é" (0xc3 0xa9); U+FF21 (0xef …)
  // before U+1F600 (0xf0 …), which UTF-16 order would reverse.
  const std::vector<std::string> in_byte_order = {
      "A", "Z",        "a-b",          "a.txt",           "a/B", "a/b", "ab",
      "z", "\xc3\xa9", "\xef\xbc\xa1", "\xf0\x9f\x98\x80"};
  TempDir dir;
  // Written in reverse so creation order cannot stand in for sorting.
  for (auto it = in_byte_order.rbegin(); it != in_byte_order.rend(); ++it) dir.write(*it, *it);
  std::vector<std::pair<std::string, std::string>> records;
  for (const auto& path : in_byte_order) records.emplace_back(path, path);
  // Computed outside forktrial from the same records in the same order.
  const std::string known =
      "sha256:937907b5d76e04707b7c66819f07439fde6509bf1f155817e1db0342e6a1fda6";
  CHECK(digest_of_records(records) == known);
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.bundle == known);
  CHECK(hashes.files == in_byte_order.size());
}

TEST_CASE("oracle: an empty file is a record of length zero", "[pack][oracle]") {
  TempDir dir;
  SECTION("alone") {
    dir.write("empty", "");
    const Hashes hashes = agreed_hashes(dir.path());
    CHECK(hashes.bundle == digest_of_records({{"empty", ""}}));
    CHECK(hashes.bundle != kEmptyDigest);
    CHECK(hashes.files == 1);
    CHECK(hashes.bytes == 0);
  }
  SECTION("between other files") {
    dir.write("a", "before");
    dir.write("b/empty", "");
    dir.write("c", "after");
    const Hashes hashes = agreed_hashes(dir.path());
    CHECK(hashes.bundle == digest_of_records({{"a", "before"}, {"b/empty", ""}, {"c", "after"}}));
    CHECK(hashes.files == 3);
  }
}

TEST_CASE("oracle: a pseudo-random file over 1 MiB, ending in a partial buffer", "[pack][oracle]") {
  TempDir dir;
  // Not a multiple of any plausible buffer size, so the last read is partial.
  const std::string large = pseudo_random_bytes(3 * (std::size_t{1} << 20) + 4099, 42);
  dir.write("blob.bin", large);
  dir.write("small.txt", "small\n");
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.bundle == digest_of_records({{"blob.bin", large}, {"small.txt", "small\n"}}));
  CHECK(hashes.bytes == large.size() + 6);
}

TEST_CASE("oracle: hidden entries, __pycache__ directories and .pyc files are skipped",
          "[pack][oracle]") {
  TempDir dir;
  dir.write("manifest.toml", "[pack]\n");
  dir.write("pack.lua", "return 1\n");
  dir.write("sub/mod.py", "x = 1\n");
  const Hashes base = agreed_hashes(dir.path());
  REQUIRE(base.files == 3);

  SECTION("skipped entries leave the hashes unchanged") {
    dir.write(".hidden", "hidden file\n");
    dir.write(".git/config", "[core]\n");
    dir.write(".git/objects/ab/cdef", "object\n");
    dir.write("sub/.env", "SECRET=1\n");
    dir.write("sub/.cache/manifest.toml", "hidden manifest\n");
    dir.write(".manifest.toml", "hidden\n");
    dir.write("__pycache__/pack.cpython-311.pyc", "bytecode");
    dir.write("sub/__pycache__/mod.cpython-311.pyc", "bytecode");
    dir.write("sub/__pycache__/notes.txt", "inside __pycache__, still skipped\n");
    dir.write("mod.pyc", "bytecode");
    dir.write("sub/deeper/mod.pyc", "bytecode");
    const Hashes hashes = agreed_hashes(dir.path());
    CHECK(hashes.bundle == base.bundle);
    CHECK(hashes.content == base.content);
    CHECK(hashes.files == base.files);
    CHECK(hashes.bytes == base.bytes);
  }
  SECTION("names that only resemble the skip rules are hashed") {
    // The rules are about names exactly: a regular file named __pycache__,
    // a directory ending .pyc, and names with '.' or ".pyc" elsewhere count.
    SECTION("a file named __pycache__") {
      dir.write("__pycache__", "a file\n");
    }
    SECTION("a directory ending .pyc") {
      dir.write("lib.pyc/init.lua", "return 1\n");
    }
    SECTION("a .pyc suffix followed by more") {
      dir.write("mod.pyc.txt", "text\n");
    }
    SECTION("a dot inside the name") {
      dir.write("sub/a.hidden", "visible\n");
    }
    const Hashes hashes = agreed_hashes(dir.path());
    CHECK(hashes.bundle != base.bundle);
    CHECK(hashes.content != base.content);
    CHECK(hashes.files == base.files + 1);
  }
}

TEST_CASE("oracle: trees differing only in manifest.toml share the content hash",
          "[pack][oracle]") {
  TempDir first;
  TempDir second;
  TempDir without;
  for (const TempDir* dir : {&first, &second, &without}) {
    dir->write("pack.lua", "return 1\n");
    dir->write("lib/a.lua", "return 2\n");
  }
  first.write("manifest.toml", "[pack]\nversion = \"0.1.0\"\n");
  second.write("manifest.toml", "[pack]\nversion = \"0.2.0\"\n");

  const Hashes a = agreed_hashes(first.path());
  const Hashes b = agreed_hashes(second.path());
  const Hashes none = agreed_hashes(without.path());
  CHECK(a.content == b.content);
  CHECK(a.content == none.content);
  CHECK(a.bundle != b.bundle);
  CHECK(a.bundle != a.content);
  // Without a manifest the bundle walk and the content walk see the same files.
  CHECK(none.bundle == none.content);
}

TEST_CASE("oracle: a nested sub/manifest.toml is part of the content hash", "[pack][oracle]") {
  TempDir dir;
  dir.write("manifest.toml", "[pack]\n");
  dir.write("sub/manifest.toml", "nested one\n");
  const Hashes before = agreed_hashes(dir.path());
  CHECK(before.content == digest_of_records({{"sub/manifest.toml", "nested one\n"}}));

  dir.write("sub/manifest.toml", "nested two\n");
  const Hashes after = agreed_hashes(dir.path());
  CHECK(after.content != before.content);
  CHECK(after.bundle != before.bundle);
}

TEST_CASE("oracle: fifos and sockets are skipped without being opened", "[pack][oracle]") {
  TempDir dir;
  dir.write("pack.lua", "return 1\n");
  dir.write("sub/a.txt", "a\n");
  const Hashes base = agreed_hashes(dir.path());

  // Opening a fifo with no writer would block; a hang here is the failure.
  make_fifo(dir.path() / "pipe");
  make_fifo(dir.path() / "sub" / "pipe.lua");
  make_socket(dir.path() / "sub" / "sock");
  const Hashes hashes = agreed_hashes(dir.path());
  CHECK(hashes.bundle == base.bundle);
  CHECK(hashes.files == base.files);
}

TEST_CASE("oracle: symlinks and non-UTF-8 or non-NFC paths are rejected by all three",
          "[pack][oracle]") {
  TempDir dir;
  dir.write("pack.lua", "return 1\n");
  dir.write("lib/target.lua", "return 2\n");
  Verdicts expected;
  SECTION("a symlink to a file") {
    fs::create_symlink("target.lua", dir.path() / "lib" / "link.lua");
    expected.emplace("symlink-to-file", "lib/link.lua");
  }
  SECTION("a symlink to a directory") {
    fs::create_directory_symlink("lib", dir.path() / "linked");
    expected.emplace("symlink-to-directory", "linked");
  }
  SECTION("a dangling symlink") {
    fs::create_symlink("nowhere", dir.path() / "dangling");
    expected.emplace("symlink-dangling", "dangling");
  }
  SECTION("an NFD file name") {
    dir.write("lib/e\xcc\x81t\xc3\xa9.lua", "return 3\n");
    expected.emplace("non-nfc-path", "lib/e\\xcc\\x81t\\xc3\\xa9.lua");
  }
  SECTION("a file name that is not UTF-8") {
    dir.write("lib/caf\xe9.lua", "return 4\n");
    expected.emplace("non-utf8-path", "lib/caf\\xe9.lua");
  }
  SECTION("a file under a directory whose name is not NFC") {
    dir.write("d\xcc\x8cir/a.lua", "return 5\n");
    fs::create_directories(dir.path() / "e\xcc\x81mpty");  // no file, no hashed path
    expected.emplace("non-nfc-path", "d\\xcc\\x8cir/a.lua");
  }
  SECTION("every violation at once") {
    fs::create_symlink("target.lua", dir.path() / "lib" / "link.lua");
    fs::create_directory_symlink("lib", dir.path() / "linked");
    dir.write("e\xcc\x81.lua", "return 3\n");
    dir.write("\xff.lua", "return 4\n");
    expected.emplace("symlink-to-file", "lib/link.lua");
    expected.emplace("symlink-to-directory", "linked");
    expected.emplace("non-nfc-path", "e\\xcc\\x81.lua");
    expected.emplace("non-utf8-path", "\\xff.lua");
  }
  check_rejected(dir.path(), expected);
}

TEST_CASE("oracle: a missing or non-directory root is rejected by all three", "[pack][oracle]") {
  TempDir dir;
  SECTION("missing") {
    check_rejected(dir.path() / "absent", {{"root-missing", "."}});
  }
  SECTION("a regular file") {
    check_rejected(dir.write("file", "x"), {{"root-not-directory", "."}});
  }
}
