// The precompiled header of forktrial's own code (cmake/ForktrialPch.cmake):
// the standard library and third-party headers most sources include, parsed
// once per build instead of once per source file. Only headers whose meaning
// no target's compile definitions change belong here (spdlog's, for one, do
// not: its configuration comes from its target's definitions).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <expected>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
