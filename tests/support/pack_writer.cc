#include "tests/support/pack_writer.h"

#include <fstream>
#include <stdexcept>

#include "pack/bundle_hash.h"

namespace forktrial::testing {
namespace {

std::string list(const std::vector<std::string>& items, char open, char close) {
  std::string out(1, open);
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", \"" : "\"") + items[i] + "\"";
  return out + close;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

std::string manifest_text(const PackSpec& spec, std::string_view content_hash) {
  return "[pack]\nname = \"" + spec.name + "\"\nversion = \"" + spec.version +
         "\"\ndescription = \"test pack\"\nlicense = \"Apache-2.0\"\n\n"
         "[pack.provenance]\nauthored_by = \"human\"\n\n"
         "[pack.integrity]\ncontent_hash = \"" +
         std::string(content_hash) +
         "\"\nsignature = \"\"\n\n"
         "[dependencies]\nforktrial = \">=0.1,<1\"\n\n"
         "[surface]\nobject_types = " +
         list(spec.object_types, '[', ']') +
         "\nrelation_types = " + list(spec.relation_types, '[', ']') +
         "\nbehaviors = " + list(spec.behaviors, '[', ']') +
         "\ntools = []\nsettings_schema = \"\"\ncapabilities = " + spec.capabilities +
         "\nconsumes = []\n\n[runtime]\nlanguage = \"lua\"\nentry = \"pack.lua\"\n";
}

std::string pack_header(const PackSpec& spec) {
  return "local pack = forktrial.pack{ name = \"" + spec.name + "\", version = \"" + spec.version +
         "\", object_types = " + list(spec.object_types, '{', '}') +
         ", relation_types = " + list(spec.relation_types, '{', '}') +
         ", tools = {}, settings_schema = \"\", capabilities = {} }\n";
}

std::string write_pack(const std::filesystem::path& root, const PackSpec& spec) {
  write_file(root / "pack.lua", spec.pack_lua);
  for (const auto& [path, text] : spec.files) write_file(root / path, text);
  auto content = pack::content_hash(root);
  if (!content) throw std::runtime_error(content.error().message);
  write_file(root / "manifest.toml", manifest_text(spec, content->str()));
  auto bundle = pack::bundle_hash(root);
  if (!bundle) throw std::runtime_error(bundle.error().message);
  return bundle->str();
}

std::filesystem::path write_pack(const TempDir& dir, std::string_view relative,
                                 const PackSpec& spec) {
  const auto root = dir.path() / std::string(relative);
  write_pack(root, spec);
  return root;
}

}  // namespace forktrial::testing
