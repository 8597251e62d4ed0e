#include "tests/sandbox/trial_fixture.h"

#include <stdexcept>

namespace forktrial::testing {
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
      // The recorded run drained its queue, so a fork of it re-queues nothing.
      event("evt_005", "runtime.idle", R"({"snapshot":{}})", "2026-01-05T10:00:03.001Z"),
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

PackSpec scenario_only(const std::string& body) {
  PackSpec spec;
  spec.pack_lua =
      R"(return forktrial.pack{ name = "candidate", version = "0.1.0", object_types = {},
    relation_types = {}, tools = {}, settings_schema = "", capabilities = {} })";
  spec.files["scenarios/main.lua"] = "function main(rt)\n" + body + "\nend\n";
  return spec;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

sandbox::TrialSpecification specification(const RecordedRun& recorded,
                                          const sandbox::PackSource& candidate,
                                          const std::string& scenario,
                                          const sandbox::TrialLimits& limits,
                                          const std::vector<sandbox::PackSource>& extras) {
  sandbox::TrialSpecification spec;
  spec.parent_run_id = recorded.run;
  spec.at_event = recorded.last;
  spec.candidate = candidate;
  spec.extra_packs = extras;
  spec.scenario = scenario;
  spec.limits = limits;
  return spec;
}

sandbox::PackSource TrialFixture::pack(const PackSpec& spec, const std::string& name) {
  const auto root = dir.path() / "packs" / name;
  return sandbox::PackSource{root.string(), Digest::parse(write_pack(root, spec)), true};
}

sandbox::TrialReport TrialFixture::trial(const sandbox::PackSource& candidate,
                                         const std::string& scenario,
                                         const sandbox::TrialLimits& limits,
                                         const std::vector<sandbox::PackSource>& extras,
                                         const sandbox::ChildOptions& options) {
  return sandbox::run_trial(store, specification(recorded, candidate, scenario, limits, extras),
                            options);
}

std::vector<store::Event> TrialFixture::fork_events(const sandbox::TrialReport& report) {
  return events_after(store, report.fork_run_id, 5);
}

std::vector<std::string> TrialFixture::types(const std::vector<store::Event>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.type);
  return out;
}

}  // namespace forktrial::testing
