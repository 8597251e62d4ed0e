// Test helper for crash_test.cc: appends batches to one run of a store
// forever (bounded), printing the head after every committed batch, until it
// is killed.
//
// usage: store_crash_helper STORE_DIR BATCH_SIZE [--no-meta-sync]
// (--no-meta-sync: the store's sync_meta is false, as the coordinator's is)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "store/event_store.h"

int main(int argc, char** argv) {
  using namespace forktrial::store;
  const bool meta_sync = argc == 3;
  if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "--no-meta-sync")) {
    std::fprintf(stderr, "usage: %s STORE_DIR BATCH_SIZE [--no-meta-sync]\n", argv[0]);
    return 2;
  }
  int batch_size = std::atoi(argv[2]);
  StoreOptions options;
  options.sync_meta = meta_sync;
  EventStore store(argv[1], options);
  RunId run("crash_run");
  auto created = store.create_run({.id = run, .label = "crash"});
  if (!created) {
    std::fprintf(stderr, "%s\n", created.error().message.c_str());
    return 1;
  }
  std::uint64_t head = 0;
  for (int batch = 0; batch < 100'000; ++batch) {
    std::vector<NewEvent> events;
    for (int i = 0; i < batch_size; ++i) {
      NewEvent e;
      e.id = EventId("b" + std::to_string(batch) + "_" + std::to_string(i));
      e.type = "crash.test";
      e.payload = R"({"batch":)" + std::to_string(batch) + R"(,"padding":")" +
                  std::string(200, 'x') + R"("})";
      e.timestamp = "2026-01-01T00:00:00Z";
      events.push_back(std::move(e));
    }
    auto appended = store.append(run, head, events);
    if (!appended) {
      std::fprintf(stderr, "%s\n", appended.error().message.c_str());
      return 1;
    }
    head = *appended;
    std::printf("%llu\n", static_cast<unsigned long long>(head));
    std::fflush(stdout);
  }
  return 0;
}
