// How the daemons log: a callback taking a level and one line of text, which
// the command line routes to spdlog (plain or JSON lines). Libraries take a
// Log and never pick a logging library themselves.
#pragma once

#include <functional>
#include <string>

namespace forktrial {

enum class LogLevel { debug, info, warn, error };
using Log = std::function<void(LogLevel, const std::string&)>;

}  // namespace forktrial
