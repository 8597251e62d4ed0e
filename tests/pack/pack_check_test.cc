// check_pack: every problem of a pack directory at once, the content hash
// compared with the files even when the manifest has other problems.
#include "pack/pack_check.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"

using namespace forktrial::pack;
using forktrial::Digest;
using forktrial::testing::TempDir;

namespace {

const std::filesystem::path kGreeter = FORKTRIAL_SOURCE_DIR "/examples/packs/greeter";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A copy of the greeter example whose manifest has `from` replaced by `to`
// and whose pack.lua was edited after the manifest recorded its hash.
std::filesystem::path tampered_greeter(const TempDir& dir, const std::string& from,
                                       const std::string& to) {
  const auto pack = dir.path() / "p";
  std::filesystem::copy(kGreeter, pack, std::filesystem::copy_options::recursive);
  std::string manifest = read_text(pack / kManifestFile);
  const auto at = manifest.find(from);
  REQUIRE(at != std::string::npos);
  manifest.replace(at, from.size(), to);
  dir.write("p/manifest.toml", manifest);
  dir.write("p/pack.lua", read_text(pack / "pack.lua") + "-- edited after the pin\n");
  return pack;
}

std::string mismatch(const Digest& recorded, const Digest& actual) {
  return "pack.integrity.content_hash: the manifest says " + recorded.str() +
         " but the files hash to " + actual.str() +
         " (the content hash covers every file except manifest.toml); if the change is "
         "intended, write the new value into the manifest";
}

}  // namespace

TEST_CASE("a tampered pack with a bad manifest field reports both", "[pack][check]") {
  TempDir dir;
  const auto pack = tampered_greeter(dir, "name = \"greeter\"", "name = \"Greeter\"");
  const auto recorded = load_manifest(kGreeter, RuntimeRequirement::optional)->content_hash;
  const auto actual = content_hash(pack);
  REQUIRE(recorded);
  REQUIRE(actual);
  REQUIRE(*recorded != *actual);
  const std::vector<std::string> expected{
      "pack.name: must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, 2 to "
      "64 characters), got \"Greeter\"",
      mismatch(*recorded, *actual)};

  const PackCheck from_disk = check_pack(pack, RuntimeRequirement::required);
  CHECK(from_disk.problems == expected);
  CHECK_FALSE(from_disk.manifest);
  CHECK(from_disk.content_hash == *actual);
  CHECK(from_disk.recorded_content_hash == recorded);

  // The trial child's path, on a pack already read, agrees.
  auto files = PackFiles::read(pack);
  REQUIRE(files);
  CHECK(check_pack(*files, RuntimeRequirement::required).problems == expected);
}

TEST_CASE("a tampered pack whose manifest has several problems reports all of them",
          "[pack][check]") {
  TempDir dir;
  const auto pack = tampered_greeter(dir, "entry = \"pack.lua\"", "entry = \"main.lua\"");
  std::string manifest = read_text(pack / kManifestFile);
  manifest.replace(manifest.find("risk_class = \"low\""), 18, "risk_class = \"severe\"");
  dir.write("p/manifest.toml", manifest);

  const PackCheck check = check_pack(pack, RuntimeRequirement::required);
  REQUIRE(check.problems.size() == 3);
  CHECK(check.problems[0] ==
        "surface.capabilities[0].risk_class: must be one of \"low\", \"medium\", \"high\", "
        "\"critical\", got \"severe\"");
  CHECK(check.problems[1].starts_with("pack.integrity.content_hash: the manifest says "));
  CHECK(check.problems[2] ==
        "runtime.entry: \"main.lua\" is not a regular file in the pack; create it or fix the "
        "path");
}

TEST_CASE("an intact pack with a bad manifest field reports only the field", "[pack][check]") {
  TempDir dir;
  const auto pack = dir.path() / "p";
  std::filesystem::copy(kGreeter, pack, std::filesystem::copy_options::recursive);
  std::string manifest = read_text(pack / kManifestFile);
  manifest.replace(manifest.find("version = \"0.1.0\""), 17, "version = \"0.1.0-beta\"");
  dir.write("p/manifest.toml", manifest);

  const PackCheck check = check_pack(pack, RuntimeRequirement::required);
  CHECK(check.problems ==
        std::vector<std::string>{"pack.version: must be a PEP 440 version like \"1.2.3\" or "
                                 "\"1.0.0rc1\", got \"0.1.0-beta\""});
  CHECK(check.recorded_content_hash == check.content_hash);
}
