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
