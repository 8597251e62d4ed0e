// Test helper for txn_gate_test.cc: another process writing to a store that
// the test process has open. It opens the store with a 1 MiB map, appends one
// event to a run and stores a blob large enough that its map must grow, then
// prints the blob's digest and exits.
//
// usage: store_grow_helper STORE_DIR RUN_ID EVENT_ID BLOB_MIB
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "store/event_store.h"

int main(int argc, char** argv) {
  using namespace forktrial::store;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s STORE_DIR RUN_ID EVENT_ID BLOB_MIB\n", argv[0]);
    return 2;
  }
  StoreOptions options;
  options.initial_map_size = std::size_t{1} << 20;
  options.max_map_size = std::size_t{256} << 20;
  EventStore store(argv[1], options);
  const RunId run(argv[2]);
  auto info = store.snapshot().run(run);
  if (!info) {
    std::fprintf(stderr, "no run %s\n", argv[2]);
    return 1;
  }
  auto appended = store.append(
      run, info->head, NewEvent{EventId(argv[3]), "grow.test", "{}", "2026-01-01T00:00:00Z"});
  if (!appended) {
    std::fprintf(stderr, "%s\n", appended.error().message.c_str());
    return 1;
  }
  const std::vector<std::byte> blob(std::size_t(std::atoi(argv[4])) << 20, std::byte{0x5a});
  const forktrial::Digest digest = store.put_blob(blob);
  std::printf("%s\n", digest.str().c_str());
  return 0;
}
