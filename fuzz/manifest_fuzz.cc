// manifest.toml (pack/manifest.h) and the whole-pack check built on it
// (pack/pack_check.h). Each input is parsed and validated as data and as a
// pack about to run; then it is written as the manifest of a small pack
// directory (manifest.toml and pack.lua), read as the trial child reads a
// pack (PackFiles) and checked. Properties: a refusal names at least one
// issue, each with its field; a manifest that validates has its content
// hash; a check passes only with a manifest that validated.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "fuzz/check.h"
#include "fuzz/scratch.h"
#include "pack/manifest.h"
#include "pack/pack_check.h"
#include "pack/pack_files.h"

namespace pack = forktrial::pack;

namespace {

void check_parse(std::string_view text, pack::RuntimeRequirement runtime) {
  auto manifest = pack::parse_manifest(text, "manifest.toml", runtime);
  if (manifest) {
    FUZZ_CHECK(manifest->content_hash.has_value());
    FUZZ_CHECK(!manifest->name.empty());
    if (runtime == pack::RuntimeRequirement::required) FUZZ_CHECK(manifest->runtime.has_value());
  } else {
    FUZZ_CHECK(!manifest.error().issues.empty());
    for (const auto& issue : manifest.error().issues) {
      FUZZ_CHECK(!issue.field.empty());
      FUZZ_CHECK(!issue.message.empty());
    }
    FUZZ_CHECK(!manifest.error().message.empty());
  }
}

const std::filesystem::path& pack_dir() {
  static const std::filesystem::path dir = [] {
    auto d = forktrial::fuzz::scratch_dir() / "pack";
    std::filesystem::create_directories(d);
    std::ofstream(d / "pack.lua") << "return {}\n";
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_parse(text, pack::RuntimeRequirement::optional);
  check_parse(text, pack::RuntimeRequirement::required);

  {
    std::ofstream out(pack_dir() / pack::kManifestFile, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  auto files = pack::PackFiles::read(pack_dir());
  FUZZ_CHECK(files.has_value());
  const pack::PackCheck check = pack::check_pack(*files, pack::RuntimeRequirement::required);
  if (check.ok()) FUZZ_CHECK(check.manifest.has_value());
  if (!check.ok()) {
    for (const auto& problem : check.problems) FUZZ_CHECK(!problem.empty());
  }
  return 0;
}
