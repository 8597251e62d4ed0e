// Shared fixtures of the store tests: events with fixed timestamps and a store
// whose clock and run ids are deterministic.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "store/event_store.h"

namespace forktrial::store::testing {

inline NewEvent event(std::string id, std::string type = "note", std::string payload = "{}") {
  NewEvent e;
  e.id = EventId(std::move(id));
  e.type = std::move(type);
  e.payload = std::move(payload);
  e.timestamp = "2026-01-02T03:04:05.000000Z";
  return e;
}

// Events "<prefix>1".."<prefix>n".
inline std::vector<NewEvent> events(const std::string& prefix, int n) {
  std::vector<NewEvent> out;
  for (int i = 1; i <= n; ++i) out.push_back(event(prefix + std::to_string(i)));
  return out;
}

inline StoreOptions fixed_options() {
  StoreOptions options;
  options.clock = [] { return std::string("2026-01-01T00:00:00.000000Z"); };
  auto counter = std::make_shared<int>(0);
  options.new_run_id = [counter] {
    char text[32];
    std::snprintf(text, sizeof text, "run_%03d", ++*counter);
    return RunId(text);
  };
  return options;
}

inline std::vector<std::string> ids_of(const std::vector<Event>& history) {
  std::vector<std::string> ids;
  for (const Event& e : history) ids.push_back(e.id.str());
  return ids;
}

}  // namespace forktrial::store::testing
