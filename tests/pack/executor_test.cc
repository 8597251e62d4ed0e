// Which executor runs a pack, told from its manifest and layout
// (pack/executor.h, docs/pack-format.md "Executors").
#include "pack/executor.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "pack/bundle_archive.h"
#include "tests/support/temp_dir.h"

namespace forktrial::pack {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const fs::path kSource = FORKTRIAL_SOURCE_DIR;

std::string text_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::expected<Executor, Status> executor_in(const fs::path& dir) {
  auto manifest = load_manifest(dir, RuntimeRequirement::optional);
  REQUIRE(manifest);
  return executor_of(*manifest, dir);
}

// What check_archive finds in the archive of the pack at `root`.
ArchiveSummary summary_of(const fs::path& root) {
  auto archive = archive_pack(root);
  REQUIRE(archive);
  auto summary = check_archive(archive->bytes);
  REQUIRE(summary);
  return *summary;
}

TEST_CASE("a forktrial pack runs on Lua, an activegraph package on activegraph's child",
          "[pack][executor]") {
  CHECK(executor_in(kSource / "examples/packs/greeter") == Executor::lua);
  CHECK_FALSE(is_activegraph_pack(kSource / "examples/packs/greeter"));
  CHECK_FALSE(is_activegraph_pack(kSource / "examples/no-such-pack"));
  CHECK(executor_name(Executor::lua) == "lua");
  CHECK(executor_name(Executor::activegraph) == "activegraph");

  // A real activegraph manifest, in a directory laid out as its pack is.
  TempDir dir;
  const std::string chat =
      text_of(kSource / "tests/pack/data/activegraph-packs/chat/manifest.toml");
  dir.write("chat/manifest.toml", chat);
  dir.write("chat/behaviors.py", "# behaviors\n");
  auto missing = executor_in(dir.path() / "chat");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == ErrorCode::invalid_argument);
  CHECK_THAT(missing.error().message, Catch::Contains("no [runtime] table and no __init__.py"));

  dir.write("chat/__init__.py", "# the pack\n");
  CHECK(executor_in(dir.path() / "chat") == Executor::activegraph);
  CHECK(is_activegraph_pack(dir.path() / "chat"));

  // A Python package that does not say it is activegraph's.
  std::string forktrial_range = chat;
  const auto at = forktrial_range.find("activegraph = ");
  REQUIRE(at != std::string::npos);
  forktrial_range.replace(at, 11, "forktrial");
  dir.write("other/manifest.toml", forktrial_range);
  dir.write("other/__init__.py", "");
  auto other = executor_in(dir.path() / "other");
  REQUIRE_FALSE(other);
  CHECK_THAT(other.error().message, Catch::Contains("without dependencies.activegraph"));
}

TEST_CASE("a pack archive tells its executor by the same rule, before it is extracted",
          "[pack][executor]") {
  const auto executor_of_archive = [](const fs::path& root) { return summary_of(root).executor; };
  CHECK(executor_of_archive(kSource / "examples/packs/greeter") == Executor::lua);

  TempDir dir;
  const std::string chat =
      text_of(kSource / "tests/pack/data/activegraph-packs/chat/manifest.toml");
  dir.write("chat/manifest.toml", chat);
  dir.write("chat/behaviors.py", "# behaviors\n");
  CHECK(executor_of_archive(dir.path() / "chat") == Executor::lua);  // no __init__.py
  dir.write("chat/__init__.py", "# the pack\n");
  CHECK(executor_of_archive(dir.path() / "chat") == Executor::activegraph);
  // An __init__.py below the root does not make a package of the pack.
  dir.write("nested/manifest.toml", chat);
  dir.write("nested/sub/__init__.py", "");
  CHECK(executor_of_archive(dir.path() / "nested") == Executor::lua);
  // Nor does a manifest that does not parse.
  dir.write("broken/manifest.toml", "[pack\n");
  dir.write("broken/__init__.py", "");
  CHECK(executor_of_archive(dir.path() / "broken") == Executor::lua);

  CHECK(executor_of_files(chat, true) == Executor::activegraph);
  CHECK(executor_of_files(chat, false) == Executor::lua);
  CHECK(executor_of_files("", true) == Executor::lua);
}

TEST_CASE("a pack archive says whether its manifest declares the pack deterministic",
          "[pack][executor][cache]") {
  const auto deterministic = [](const fs::path& root) { return summary_of(root).deterministic; };
  CHECK(deterministic(kSource / "examples/packs/greeter"));  // deterministic = true
  CHECK(deterministic(kSource / "examples/packs/chat_echo"));

  const std::string greeter = text_of(kSource / "examples/packs/greeter/manifest.toml");
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string manifest = greeter;
    const auto at = manifest.find(from);
    REQUIRE(at != std::string::npos);
    return manifest.replace(at, from.size(), to);
  };
  TempDir dir;
  const auto pack = [&](const std::string& name, const std::string& manifest) {
    dir.write(name + "/manifest.toml", manifest);
    dir.write(name + "/pack.lua", text_of(kSource / "examples/packs/greeter/pack.lua"));
    return dir.path() / name;
  };
  CHECK(deterministic(pack("same", greeter)));
  CHECK_FALSE(deterministic(pack("false", with("deterministic = true", "deterministic = false"))));
  // Defaulted, not declared: only a written true counts.
  CHECK_FALSE(deterministic(pack("unsaid", with("deterministic = true\n", ""))));
  CHECK_FALSE(deterministic(
      pack("no-fixtures",
           with("[fixtures]\nentrypoint = \"scenarios/smoke.lua\"\ndeterministic = true\n", ""))));
  CHECK_FALSE(deterministic(pack("broken", "[pack\n")));
  CHECK(manifest_declares_deterministic(greeter));
  CHECK_FALSE(manifest_declares_deterministic(""));
}

}  // namespace
}  // namespace forktrial::pack
