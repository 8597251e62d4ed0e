// Test support for the runtime: packs written into a scratch directory and a
// runtime whose sink and log are recorded.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/lua_host.h"
#include "runtime/runtime.h"
#include "store/event.h"
#include "tests/support/pack_writer.h"
#include "tests/support/temp_dir.h"

namespace forktrial::testing {

// A history event as the store would return it.
store::Event history_event(std::uint64_t seq, std::string type, std::string payload,
                           std::string timestamp = "2024-05-01T12:00:00.000Z");

struct Recorded {
  std::vector<store::NewEvent> sunk;
  std::vector<std::string> log;
  std::unique_ptr<runtime::Runtime> rt;

  // Types of the events the sink received, in order.
  std::vector<std::string> types() const;
  // The same without the behavior.* lifecycle records.
  std::vector<std::string> work_types() const;
  // The sunk events of one type.
  std::vector<store::NewEvent> of_type(std::string_view type) const;
};

runtime::RuntimeConfig test_config();

// A runtime over `history` recording what it produces; fails the test if the
// runtime cannot be created.
std::unique_ptr<Recorded> make_runtime(std::vector<store::Event> history = {},
                                       runtime::RuntimeConfig config = test_config());

// Loads `dir` (failing the test with the load error's message otherwise).
void load_or_fail(Recorded& r, const std::filesystem::path& dir,
                  runtime::PackRole role = runtime::PackRole::candidate);

// The JSON payload of `event`.
nlohmann::json payload_of(const store::NewEvent& event);

std::filesystem::path examples_dir();

// One confined Lua state with a host of its own, for tests of the host and of
// the conversions; warnings are recorded as "origin: line".
struct HostedLua {
  explicit HostedLua(std::size_t cap_bytes = 0);
  std::vector<std::string> warnings;
  runtime::LuaHost host;
  runtime::LuaStatePtr state;

  // Runs `code` as a Lua chunk named "=test"; the failure if it raised.
  std::optional<runtime::LuaFailure> run(std::string_view code);
  // tostring() of the global `name`.
  std::string global(const char* name);
};

}  // namespace forktrial::testing
