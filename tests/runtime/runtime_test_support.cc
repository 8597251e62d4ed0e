#include "tests/runtime/runtime_test_support.h"

#include <catch2/catch.hpp>
#include <lua.hpp>

namespace forktrial::testing {
store::Event history_event(std::uint64_t seq, std::string type, std::string payload,
                           std::string timestamp) {
  store::Event event;
  event.id = store::numbered_event_id(seq);
  event.type = std::move(type);
  event.payload = std::move(payload);
  event.timestamp = std::move(timestamp);
  event.actor = "recorder";
  event.seq = seq;
  return event;
}

std::vector<std::string> Recorded::types() const {
  std::vector<std::string> out;
  for (const auto& event : sunk) out.push_back(event.type);
  return out;
}

std::vector<std::string> Recorded::work_types() const {
  std::vector<std::string> out;
  for (const auto& event : sunk) {
    if (!event.type.starts_with("behavior.")) out.push_back(event.type);
  }
  return out;
}

std::vector<store::NewEvent> Recorded::of_type(std::string_view type) const {
  std::vector<store::NewEvent> out;
  for (const auto& event : sunk) {
    if (event.type == type) out.push_back(event);
  }
  return out;
}

runtime::RuntimeConfig test_config() {
  runtime::RuntimeConfig config;
  config.run_id = store::RunId("run_fork");
  config.trial_id = "trial-1";
  return config;
}

std::unique_ptr<Recorded> make_runtime(std::vector<store::Event> history,
                                       runtime::RuntimeConfig config) {
  auto recorded = std::make_unique<Recorded>();
  Recorded* r = recorded.get();
  auto rt = runtime::Runtime::create(
      std::move(config), std::move(history),
      [r](const store::NewEvent& event) { r->sunk.push_back(event); },
      [r](std::string_view line) { r->log.emplace_back(line); });
  if (!rt) FAIL("cannot create the runtime: " << rt.error());
  recorded->rt = std::move(*rt);
  return recorded;
}

void load_or_fail(Recorded& r, const std::filesystem::path& dir, runtime::PackRole role) {
  auto loaded = r.rt->load_pack(dir, role);
  if (!loaded) FAIL(loaded.error().message);
}

nlohmann::json payload_of(const store::NewEvent& event) {
  return nlohmann::json::parse(event.payload);
}

std::filesystem::path examples_dir() {
  return std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "examples" / "packs";
}

HostedLua::HostedLua(std::size_t cap_bytes)
    : host(cap_bytes, [this](std::string_view origin, std::string_view line) {
        warnings.push_back(std::string(origin) + ": " + std::string(line));
      }) {
  auto created = runtime::new_confined_state(host, 1, "test");
  if (!created) FAIL("cannot create a confined state: " << created.error());
  state = std::move(*created);
}

std::optional<runtime::LuaFailure> HostedLua::run(std::string_view code) {
  return runtime::run_protected(state.get(), [&](lua_State* L) {
    if (luaL_loadbufferx(L, code.data(), code.size(), "=test", "t") != LUA_OK) lua_error(L);
    lua_call(L, 0, 0);
  });
}

std::string HostedLua::global(const char* name) {
  std::string text;
  auto failure = runtime::run_protected(state.get(), [&](lua_State* L) {
    lua_getglobal(L, name);
    std::size_t length = 0;
    const char* data = luaL_tolstring(L, -1, &length);
    text.assign(data, length);
  });
  if (failure) FAIL("cannot read the global " << name << ": " << failure->message);
  return text;
}

}  // namespace forktrial::testing
