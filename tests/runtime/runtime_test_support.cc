#include "tests/runtime/runtime_test_support.h"

#include <catch2/catch.hpp>

namespace forktrial::testing {
namespace {

std::string toml_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (const auto& item : items) out += (out.size() > 1 ? ", \"" : "\"") + item + "\"";
  return out + "]";
}

std::string lua_list(const std::vector<std::string>& items) {
  std::string out = "{";
  for (const auto& item : items) out += (out.size() > 1 ? ", \"" : "\"") + item + "\"";
  return out + "}";
}

}  // namespace

std::string manifest_text(const PackSpec& spec) {
  return "[pack]\nname = \"" + spec.name + "\"\nversion = \"" + spec.version +
         "\"\ndescription = \"test pack\"\nlicense = \"Apache-2.0\"\n\n"
         "[pack.provenance]\nauthored_by = \"human\"\n\n"
         "[pack.integrity]\ncontent_hash = "
         "\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n"
         "signature = \"\"\n\n"
         "[dependencies]\nforktrial = \">=0.1,<1\"\n\n"
         "[surface]\nobject_types = " +
         toml_list(spec.object_types) + "\nrelation_types = " + toml_list(spec.relation_types) +
         "\nbehaviors = " + toml_list(spec.behaviors) +
         "\ntools = []\nsettings_schema = \"\"\ncapabilities = " + spec.capabilities +
         "\nconsumes = []\n\n[runtime]\nlanguage = \"lua\"\nentry = \"pack.lua\"\n";
}

std::string pack_header(const PackSpec& spec) {
  return "local pack = forktrial.pack{ name = \"" + spec.name + "\", version = \"" + spec.version +
         "\", object_types = " + lua_list(spec.object_types) +
         ", relation_types = " + lua_list(spec.relation_types) +
         ", tools = {}, settings_schema = \"\", capabilities = {} }\n";
}

std::filesystem::path write_pack(const TempDir& dir, std::string_view relative,
                                 const PackSpec& spec) {
  dir.write(std::string(relative) + "/manifest.toml", manifest_text(spec));
  dir.write(std::string(relative) + "/pack.lua", spec.pack_lua);
  return dir.path() / std::string(relative);
}

store::Event history_event(std::uint64_t seq, std::string type, std::string payload,
                           std::string timestamp) {
  store::Event event;
  char id[32];
  std::snprintf(id, sizeof id, "evt_%03llu", static_cast<unsigned long long>(seq));
  event.id = store::EventId(id);
  event.type = std::move(type);
  event.payload = std::move(payload);
  event.timestamp = std::move(timestamp);
  event.actor = "recorder";
  event.seq = seq;
  return event;
}

std::vector<std::string> Recorded::types() const {
  std::vector<std::string> out;
  for (const auto& event : sunk) out.push_back(event.type);
  return out;
}

std::vector<store::NewEvent> Recorded::of_type(std::string_view type) const {
  std::vector<store::NewEvent> out;
  for (const auto& event : sunk) {
    if (event.type == type) out.push_back(event);
  }
  return out;
}

runtime::RuntimeConfig test_config() {
  runtime::RuntimeConfig config;
  config.run_id = store::RunId("run_fork");
  config.trial_id = "trial-1";
  return config;
}

std::unique_ptr<Recorded> make_runtime(std::vector<store::Event> history,
                                       runtime::RuntimeConfig config) {
  auto recorded = std::make_unique<Recorded>();
  Recorded* r = recorded.get();
  auto rt = runtime::Runtime::create(
      std::move(config), std::move(history),
      [r](const store::NewEvent& event) { r->sunk.push_back(event); },
      [r](std::string_view line) { r->log.emplace_back(line); });
  if (!rt) FAIL("cannot create the runtime: " << rt.error());
  recorded->rt = std::move(*rt);
  return recorded;
}

void load_or_fail(Recorded& r, const std::filesystem::path& dir, runtime::PackRole role) {
  auto loaded = r.rt->load_pack(dir, role);
  if (!loaded) FAIL(loaded.error().message());
}

nlohmann::json payload_of(const store::NewEvent& event) {
  return nlohmann::json::parse(event.payload);
}

std::filesystem::path examples_dir() {
  return std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "examples" / "packs";
}

}  // namespace forktrial::testing
