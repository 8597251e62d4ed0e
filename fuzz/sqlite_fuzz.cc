// Import of an activegraph SQLite store (import/activegraph_sqlite.h): each
// input is written as a SQLite file and imported into a new, empty event
// store. Whatever the file holds, the import succeeds or is refused with a
// message, without a crash; an import that succeeds returned runs that the
// store now has, parents before their forks.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "fuzz/check.h"
#include "fuzz/scratch.h"
#include "import/activegraph_sqlite.h"
#include "store/event_store.h"

namespace fs = std::filesystem;
namespace store = forktrial::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  const fs::path dir = forktrial::fuzz::scratch_dir() / ("sqlite-" + std::to_string(inputs++));
  fs::create_directories(dir);
  const fs::path file = dir / "activegraph.db";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  {
    store::StoreOptions options;
    options.sync = false;
    options.initial_map_size = std::size_t{64} << 20;
    store::EventStore events(dir / "store", options);
    auto runs = forktrial::import::import_activegraph_sqlite(events, file);
    if (runs) {
      auto snapshot = events.snapshot();
      std::set<std::string> seen;
      for (const store::RunInfo& run : *runs) {
        FUZZ_CHECK(snapshot.run(run.id).has_value());
        if (run.fork_of) FUZZ_CHECK(seen.contains(run.fork_of->parent.str()));
        seen.insert(run.id.str());
      }
    } else {
      FUZZ_CHECK(!runs.error().message.empty());
    }
  }
  fs::remove_all(dir);
  return 0;
}
