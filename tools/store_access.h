// Opening the event store from the command line, with the errors a user of
// `--store PATH` needs.
#pragma once

#include <string>

#include "store/event_store.h"

namespace forktrial::tools {

inline constexpr const char* kDefaultStore = "./forktrial-store";

// Opens the store at `path`. With `create` false, a directory holding no store
// is refused rather than silently created behind a typo. Throws CommandFailed.
store::EventStore open_store(const std::string& path, bool create);

}  // namespace forktrial::tools
