#include "runtime/lua_host.h"

#include <cstdlib>
#include <lua.hpp>
#include <stdexcept>

namespace forktrial::runtime {
namespace {

struct ProtectedCall {
  const std::function<void(lua_State*)>* body;
  std::optional<LuaFailure> failure;
  std::string traceback;
};

std::string value_text(lua_State* L, int index) {
  if (lua_type(L, index) == LUA_TSTRING) {
    std::size_t length = 0;
    const char* data = lua_tolstring(L, index, &length);
    return std::string(data, length);
  }
  return "(error object is a " + std::string(luaL_typename(L, index)) + " value)";
}

// Message handler: keeps the traceback (the stack is still there), returns
// the error value turned into text through __tostring where there is one.
int message_handler(lua_State* L) {
  auto* call = static_cast<ProtectedCall*>(lua_touserdata(L, lua_upvalueindex(1)));
  if (lua_type(L, 1) != LUA_TSTRING && luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    luaL_tolstring(L, 1, nullptr);
    lua_replace(L, 1);
  }
  luaL_traceback(L, L, nullptr, 1);
  call->traceback = value_text(L, -1);
  lua_pop(L, 1);
  lua_settop(L, 1);
  return 1;
}

int run_body(lua_State* L) {
  auto* call = static_cast<ProtectedCall*>(lua_touserdata(L, 1));
  lua_settop(L, 0);
  std::string error;
  try {
    (*call->body)(L);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) luaL_error(L, "%s", error.c_str());
  return 0;
}

// Runs inside an outer pcall so that allocating the handler closure is itself
// protected; the inner pcall carries the handler.
int trampoline(lua_State* L) {
  auto* call = static_cast<ProtectedCall*>(lua_touserdata(L, 1));
  lua_pushlightuserdata(L, call);
  lua_pushcclosure(L, message_handler, 1);
  const int handler = lua_gettop(L);
  lua_pushcfunction(L, run_body);
  lua_pushlightuserdata(L, call);
  const int status = lua_pcall(L, 1, 0, handler);
  if (status != LUA_OK) {
    call->failure = LuaFailure{status, value_text(L, -1), std::move(call->traceback)};
  }
  return 0;
}

// The traceback lines of the host's own C frames say nothing to a pack author.
std::string trim_traceback(const std::string& traceback) {
  std::string out;
  std::size_t start = 0;
  while (start < traceback.size()) {
    std::size_t end = traceback.find('\n', start);
    if (end == std::string::npos) end = traceback.size();
    const std::string_view line(traceback.data() + start, end - start);
    if (line != "\t[C]: in ?") {
      if (!out.empty()) out += '\n';
      out += line;
    }
    start = end + 1;
  }
  return out == "stack traceback:" ? std::string() : out;
}

// load() with the mode forced to text: binary chunks bypass the parser's
// checks and can crash the interpreter.
int text_only_load(lua_State* L) {
  const int given = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  if (given >= 2) {
    lua_pushvalue(L, 2);
  } else {
    lua_pushnil(L);
  }
  lua_pushliteral(L, "t");
  int args = 3;
  if (given >= 4) {  // an explicit nil environment differs from an absent one
    lua_pushvalue(L, 4);
    ++args;
  }
  lua_call(L, args, LUA_MULTRET);
  return lua_gettop(L) - given;
}

// math.randomseed() without arguments would seed from the time; here it
// restores the trial's seed. With arguments it behaves as usual.
int deterministic_randomseed(lua_State* L) {
  const int given = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  if (given == 0) {
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_pushvalue(L, lua_upvalueindex(3));
  } else {
    for (int i = 1; i <= given; ++i) lua_pushvalue(L, i);
  }
  lua_call(L, given == 0 ? 2 : given, LUA_MULTRET);
  return lua_gettop(L) - given;
}

void open_libraries(lua_State* L, std::uint64_t random_seed) {
  const luaL_Reg libraries[] = {
      {LUA_GNAME, luaopen_base},        {LUA_TABLIBNAME, luaopen_table},
      {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
      {LUA_UTF8LIBNAME, luaopen_utf8},  {LUA_COLIBNAME, luaopen_coroutine},
  };
  for (const auto& library : libraries) {
    luaL_requiref(L, library.name, library.func, 1);
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  lua_setglobal(L, "dofile");
  lua_pushnil(L);
  lua_setglobal(L, "loadfile");

  lua_getglobal(L, "load");
  lua_pushcclosure(L, text_only_load, 1);
  lua_setglobal(L, "load");

  lua_getglobal(L, LUA_STRLIBNAME);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);

  lua_getglobal(L, LUA_MATHLIBNAME);
  lua_getfield(L, -1, "randomseed");
  const auto high = static_cast<lua_Integer>(random_seed >> 1);
  const auto low = static_cast<lua_Integer>(seed_from(std::to_string(random_seed)) >> 1);
  lua_pushvalue(L, -1);
  lua_pushinteger(L, high);
  lua_pushinteger(L, low);
  lua_call(L, 2, 0);
  lua_pushinteger(L, high);
  lua_pushinteger(L, low);
  lua_pushcclosure(L, deterministic_randomseed, 3);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
}

}  // namespace

void* MemoryCap::allocate(void* ud, void* ptr, std::size_t old_size,
                          std::size_t new_size) noexcept {
  auto* cap = static_cast<MemoryCap*>(ud);
  // For a new block Lua passes the object's type in `old_size`, not a size.
  const std::size_t old_bytes = ptr == nullptr ? 0 : old_size;
  if (new_size == 0) {
    std::free(ptr);
    cap->used_ -= old_bytes;
    return nullptr;
  }
  if (cap->limit_ != 0 && new_size > old_bytes && cap->used_ - old_bytes + new_size > cap->limit_) {
    ++cap->refusals_;
    return nullptr;
  }
  void* block = std::realloc(ptr, new_size);
  if (block == nullptr) return nullptr;
  cap->used_ = cap->used_ - old_bytes + new_size;
  return block;
}

void LuaStateCloser::operator()(lua_State* L) const {
  lua_close(L);
}

bool LuaFailure::out_of_memory() const {
  return status == LUA_ERRMEM;
}

std::string LuaFailure::error_type() const {
  switch (status) {
    case LUA_ERRMEM:
      return "memory_error";
    case LUA_ERRERR:
      return "error_handler_error";
    default:
      return "runtime_error";
  }
}

std::expected<LuaStatePtr, std::string> new_confined_state(MemoryCap& cap,
                                                           std::uint64_t random_seed) {
  LuaStatePtr state(lua_newstate(&MemoryCap::allocate, &cap));
  if (!state) {
    return std::unexpected("cannot create a Lua state within the memory cap of " +
                           std::to_string(cap.limit()) + " bytes");
  }
  if (auto failure =
          run_protected(state.get(), [&](lua_State* L) { open_libraries(L, random_seed); })) {
    return std::unexpected("cannot open the Lua libraries: " + failure->message);
  }
  return state;
}

std::optional<LuaFailure> run_protected(lua_State* L, const std::function<void(lua_State*)>& body) {
  ProtectedCall call{&body, std::nullopt, {}};
  const int top = lua_gettop(L);
  lua_pushcfunction(L, trampoline);
  lua_pushlightuserdata(L, &call);
  const int status = lua_pcall(L, 1, 0, 0);
  if (status != LUA_OK) call.failure = LuaFailure{status, value_text(L, -1), {}};
  lua_settop(L, top);
  if (call.failure) call.failure->traceback = trim_traceback(call.failure->traceback);
  return call.failure;
}

std::uint64_t seed_from(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace forktrial::runtime
