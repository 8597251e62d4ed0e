// Which executor runs a pack, told from its manifest and layout
// (pack/executor.h, docs/pack-format.md "Executors").
#include "pack/executor.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace forktrial::pack
