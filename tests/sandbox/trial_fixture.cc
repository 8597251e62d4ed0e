#include "tests/sandbox/trial_fixture.h"

#include <fstream>
#include <stdexcept>

#include "pack/bundle_hash.h"

namespace forktrial::testing {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string toml_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
  return out + "]";
}

}  // namespace

std::string write_pack(const std::filesystem::path& dir, const PackSpec& spec) {
  write_file(dir / "pack.lua", spec.lua);
  for (const auto& [path, text] : spec.files) write_file(dir / path, text);
  auto content = pack::content_hash(dir);
  if (!content) throw std::runtime_error(content.error().message());
  write_file(dir / "manifest.toml",
             "[pack]\nname = \"" + spec.name + "\"\nversion = \"" + spec.version +
                 "\"\ndescription = \"test pack\"\nlicense = \"MIT\"\n\n"
                 "[pack.provenance]\nauthored_by = \"agent\"\n\n"
                 "[pack.integrity]\ncontent_hash = \"" +
                 content->str() +
                 "\"\n\n[dependencies]\nforktrial = \">=0.1\"\n\n[surface]\nobject_types = " +
                 toml_list(spec.object_types) + "\nrelation_types = " +
                 toml_list(spec.relation_types) + "\nbehaviors = " + toml_list(spec.behaviors) +
                 "\ntools = []\nsettings_schema = \"\"\ncapabilities = []\n\n"
                 "[runtime]\nlanguage = \"lua\"\nentry = \"pack.lua\"\n");
  auto bundle = pack::bundle_hash(dir);
  if (!bundle) throw std::runtime_error(bundle.error().message());
  return bundle->str();
}

RecordedRun record_parent_run(store::EventStore& store) {
  RecordedRun recorded;
  auto run = store.create_run(store::NewRun{.id = recorded.run, .label = "recorded"});
  if (!run) throw std::runtime_error(run.error().message);
  auto event = [](const char* id, const char* type, const char* payload, const char* time) {
    store::NewEvent e;
    e.id = store::EventId(id);
    e.type = type;
    e.payload = payload;
    e.timestamp = time;
    e.actor = "user";
    return e;
  };
  std::vector<store::NewEvent> events = {
      event("evt_001", "goal.created", R"({"goal":"chat"})", "2026-01-05T10:00:00.000Z"),
      event("evt_002", "chat.message", R"({"text":"hello"})", "2026-01-05T10:00:01.000Z"),
      event("evt_003", "chat.message", R"({"text":"how are you"})", "2026-01-05T10:00:02.000Z"),
      event("evt_004", "chat.message", R"({"text":"bye"})", "2026-01-05T10:00:03.000Z"),
  };
  auto appended = store.append(recorded.run, 0, events);
  if (!appended) throw std::runtime_error(appended.error().message);
  return recorded;
}

std::vector<store::Event> events_after(store::EventStore& store, const std::string& run,
                                       std::uint64_t after_seq) {
  auto snapshot = store.snapshot();
  auto info = snapshot.run(store::RunId(run));
  if (!info) throw std::runtime_error("no run " + run);
  return snapshot.history(*info, after_seq + 1);
}

}  // namespace forktrial::testing
