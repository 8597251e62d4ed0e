// `forktrial pack ...` run as a user would: the real binary, as a process.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pack/bundle_hash.h"
#include "pack/manifest.h"
#include "tests/support/temp_dir.h"

using forktrial::testing::run_command;
using forktrial::testing::TempDir;

namespace {

const std::string kGreeter = FORKTRIAL_SOURCE_DIR "/examples/packs/greeter";

forktrial::testing::CommandResult forktrial_cli(std::vector<std::string> args) {
  return forktrial::testing::run_forktrial(std::move(args));
}

}  // namespace

TEST_CASE("pack hash prints the bundle pin, --content the content hash, --json both",
          "[pack][cli]") {
  auto bundle = forktrial::pack::bundle_hash(kGreeter);
  auto content = forktrial::pack::content_hash(kGreeter);
  REQUIRE(bundle);
  REQUIRE(content);

  auto plain = forktrial_cli({"pack", "hash", kGreeter});
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == bundle->str() + "\n");

  auto content_only = forktrial_cli({"pack", "hash", "--content", kGreeter});
  CHECK(content_only.out == content->str() + "\n");

  auto json = forktrial_cli({"pack", "hash", "--json", kGreeter});
  REQUIRE(json.exit_code == 0);
  auto parsed = nlohmann::json::parse(json.out);
  CHECK(parsed["bundle_hash"] == bundle->str());
  CHECK(parsed["content_hash"] == content->str());
  CHECK(parsed["files"] == 3);
}

TEST_CASE("pack verify exits 0 on a match and names both hashes on a mismatch", "[pack][cli]") {
  auto bundle = forktrial::pack::bundle_hash(kGreeter);
  REQUIRE(bundle);
  auto ok = forktrial_cli({"pack", "verify", kGreeter, "--expect", bundle->str()});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out == "ok: " + kGreeter + " matches " + bundle->str() + "\n");

  const std::string wrong = "sha256:" + std::string(64, 'f');
  auto bad = forktrial_cli({"pack", "verify", kGreeter, "--expect", wrong});
  CHECK(bad.exit_code != 0);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("pinned " + wrong) != std::string::npos);
  CHECK(bad.err.find("hashes to " + bundle->str()) != std::string::npos);
  CHECK(bad.err.find("manifest.toml included") != std::string::npos);

  auto malformed = forktrial_cli({"pack", "verify", kGreeter, "--expect", "sha256:1234"});
  CHECK(malformed.exit_code != 0);
  CHECK(malformed.err.find("malformed bundle pin \"sha256:1234\"") != std::string::npos);
}

TEST_CASE("pack check passes the examples and lists every problem of a broken pack",
          "[pack][cli]") {
  for (const char* name : {"greeter", "chat_echo"}) {
    auto ok = forktrial_cli({"pack", "check", "--executable",
                             FORKTRIAL_SOURCE_DIR "/examples/packs/" + std::string(name)});
    CHECK(ok.exit_code == 0);
    CHECK(ok.err.empty());
  }

  TempDir dir;
  std::filesystem::copy(kGreeter, dir.path() / "p", std::filesystem::copy_options::recursive);
  const auto pack = dir.path() / "p";
  dir.write("p/pack.lua", "-- edited after the manifest was written\nreturn nil\n");
  std::filesystem::create_symlink("pack.lua", pack / "alias.lua");

  auto bad = forktrial_cli({"pack", "check", "--json", pack.string()});
  CHECK(bad.exit_code != 0);
  auto parsed = nlohmann::json::parse(bad.out);
  CHECK(parsed["ok"] == false);
  REQUIRE(parsed["problems"].size() == 1);
  CHECK(parsed["problems"][0].get<std::string>().starts_with("alias.lua: symlink to file"));

  std::filesystem::remove(pack / "alias.lua");
  auto edited = forktrial_cli({"pack", "check", pack.string()});
  CHECK(edited.exit_code != 0);
  CHECK(edited.out.empty());
  CHECK(edited.err.find("pack.integrity.content_hash: the manifest says ") != std::string::npos);
}

TEST_CASE("pack check reports a bad manifest field and tampered content together", "[pack][cli]") {
  TempDir dir;
  std::filesystem::copy(kGreeter, dir.path() / "p", std::filesystem::copy_options::recursive);
  const auto pack = dir.path() / "p";
  std::ifstream in(pack / "manifest.toml");
  std::stringstream manifest;
  manifest << in.rdbuf();
  std::string text = manifest.str();
  text.replace(text.find("version = \"0.1.0\""), 17, "version = \"0.1.0-beta\"");
  dir.write("p/manifest.toml", text);
  dir.write("p/pack.lua", "-- edited after the manifest was written\nreturn nil\n");
  const auto recorded =
      forktrial::pack::load_manifest(kGreeter, forktrial::pack::RuntimeRequirement::optional)
          ->content_hash;
  const auto actual = forktrial::pack::content_hash(pack);
  REQUIRE(recorded);
  REQUIRE(actual);

  auto as_json = forktrial_cli({"pack", "check", "--json", pack.string()});
  CHECK(as_json.exit_code == 1);
  auto parsed = nlohmann::json::parse(as_json.out);
  CHECK(parsed["ok"] == false);
  CHECK(parsed["content_hash"] == actual->str());
  CHECK(parsed["recorded_content_hash"] == recorded->str());
  REQUIRE(parsed["problems"].size() == 2);
  CHECK(parsed["problems"][0] ==
        "pack.version: must be a PEP 440 version like \"1.2.3\" or \"1.0.0rc1\", got "
        "\"0.1.0-beta\"");
  CHECK(parsed["problems"][1] == "pack.integrity.content_hash: the manifest says " +
                                     recorded->str() + " but the files hash to " + actual->str() +
                                     " (the content hash covers every file except "
                                     "manifest.toml); if the change is intended, write the new "
                                     "value into the manifest");

  auto as_text = forktrial_cli({"pack", "check", pack.string()});
  CHECK(as_text.exit_code == 1);
  CHECK(as_text.out.empty());
  CHECK(as_text.err.find("2 problems") != std::string::npos);
  CHECK(as_text.err.find("pack.version: must be a PEP 440 version") != std::string::npos);
  CHECK(as_text.err.find("pack.integrity.content_hash: the manifest says " + recorded->str()) !=
        std::string::npos);
}

TEST_CASE("pack hash on a bad tree prints nothing on stdout and every violation on stderr",
          "[pack][cli]") {
  TempDir dir;
  dir.write("a.lua", "x");
  std::filesystem::create_symlink("a.lua", dir.path() / "b.lua");
  std::filesystem::create_symlink("a.lua", dir.path() / "c.lua");
  auto result = forktrial_cli({"pack", "hash", dir.path().string()});
  CHECK(result.exit_code == 1);
  CHECK(result.out.empty());
  CHECK(result.err.find("2 violations") != std::string::npos);
  CHECK(result.err.find("b.lua: symlink to file") != std::string::npos);
  CHECK(result.err.find("c.lua: symlink to file") != std::string::npos);

  auto missing = forktrial_cli({"pack", "hash", (dir.path() / "nope").string()});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("does not exist") != std::string::npos);
}

TEST_CASE("forktrial --help and every pack subcommand's --help carry an example", "[cli]") {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"},
                                        {"pack", "--help"},
                                        {"pack", "hash", "--help"},
                                        {"pack", "verify", "--help"},
                                        {"pack", "check", "--help"}}) {
    args.insert(args.begin(), FORKTRIAL_BINARY);
    auto result = run_command(args);
    CHECK(result.exit_code == 0);
    CHECK(result.out.find("Examples:") != std::string::npos);
  }
}

TEST_CASE("pack commands print hostile paths and manifest text safely", "[pack][cli]") {
  TempDir dir;
  const auto root = dir.path() / "caf\xe9";
  dir.write("caf\xe9/manifest.toml", "[pack]\nname = \"\\u001b[31mred\"\nversion = \"1.0.0\"\n");
  auto as_json = forktrial_cli({"pack", "check", "--json", root.string()});
  INFO(as_json.err);
  CHECK(as_json.exit_code != 0);
  auto parsed = nlohmann::json::parse(as_json.out);
  CHECK(parsed["ok"] == false);
  CHECK(parsed["path"].get<std::string>().ends_with("caf\xEF\xBF\xBD"));
  bool named = false;
  for (const auto& problem : parsed["problems"]) {
    named = named || problem.get<std::string>().find("\x1b[31mred") != std::string::npos;
  }
  CHECK(named);

  auto as_text = forktrial_cli({"pack", "check", root.string()});
  CHECK(as_text.exit_code != 0);
  CHECK(as_text.err.find('\x1b') == std::string::npos);
  CHECK(as_text.err.find("\xe9") == std::string::npos);
  CHECK(as_text.err.find("\"\\x1b[31mred\"") != std::string::npos);
  CHECK(as_text.err.find("caf\\xe9") != std::string::npos);
}
