#include "tools/store_access.h"

#include <filesystem>

#include "tools/cli_support.h"

namespace forktrial::tools {

store::EventStore open_store(const std::string& path, bool create) {
  if (!create && !std::filesystem::exists(std::filesystem::path(path) / "data.mdb")) {
    throw CommandFailed("no store at " + path +
                        " (no data.mdb there); pass --store PATH, or create one with "
                        "`forktrial run new` or `forktrial run import FILE`");
  }
  try {
    return store::EventStore(path);
  } catch (const store::StoreError& e) {
    throw CommandFailed("cannot open the store at " + path + ": " + e.what());
  }
}

}  // namespace forktrial::tools
