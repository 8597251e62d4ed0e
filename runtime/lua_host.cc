#include "runtime/lua_host.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <lua.hpp>
#include <new>
#include <stdexcept>

namespace forktrial::runtime {

// What a confined state knows about itself. A pointer to it sits in the
// state's extra space (LUA_EXTRASPACE), which every coroutine copies from the
// main thread; it is created with the state and deleted after lua_close.
struct StateContext {
  LuaHost* host = nullptr;
  std::string origin;
  std::string warning;  // the pieces of a warning issued so far
  bool warning_continues = false;
  bool warning_cut = false;
};

namespace {

StateContext& context_of(lua_State* L) {
  return **static_cast<StateContext**>(lua_getextraspace(L));
}

constexpr const char* kMemoryRanOut = "memory ran out";

}  // namespace

// The parts of the host that run inside Lua: the stop hook, the guarded
// coroutine functions and the warning function.
struct HostAccess {
  static LuaHost& host(lua_State* L) { return *context_of(L).host; }

  // The count hook set on every thread that may run once the host stops.
  static void stop_hook(lua_State* L, lua_Debug*) {
    const LuaHost& h = host(L);
    if (!h.stopped()) return;  // a refused allocation whose retry is still to come
    luaL_where(L, 0);          // in a hook, level 0 is the Lua function running
    try {                      // a hook is no lua_CFunction: no boundary around it
      const std::string message = h.stop_message();
      lua_pushlstring(L, message.data(), message.size());
    } catch (const std::bad_alloc&) {
      lua_pushliteral(L, "the runtime has stopped");
    }
    lua_concat(L, 2);
    lua_error(L);
  }

  static void refuse_when_stopped(lua_State* L, const char* what) {
    if (host(L).stopped()) luaL_error(L, "%s: %s", what, host(L).stop_message().c_str());
  }

  // A coroutine running inside one of the guarded functions: while it runs,
  // a stop must reach it.
  class Running {
   public:
    Running(lua_State* L, lua_State* coroutine) : host_(host(L)), coroutine_(coroutine) {
      if (coroutine_ != nullptr) host_.running_.push_back(coroutine_);
    }
    ~Running() {
      if (coroutine_ != nullptr) host_.running_.pop_back();
    }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;

   private:
    LuaHost& host_;
    lua_State* coroutine_;
  };

  // A thread reset in progress, counted when `counts`; refuses (and stops
  // the host) beyond kMaxResetNesting.
  class Reset {
   public:
    Reset(lua_State* L, bool counts, const char* what) : host_(host(L)), counts_(counts) {
      if (!counts_) return;
      if (host_.reset_nesting_ >= LuaHost::kMaxResetNesting) {
        host_.out_of_memory(std::string(what) + " nested more than " +
                            std::to_string(LuaHost::kMaxResetNesting) +
                            " levels deep inside __close handlers; Lua 5.4.4 does not bound the "
                            "C stack across such resets, so the trial stops");
        refuse_when_stopped(L, what);
      }
      ++host_.reset_nesting_;
    }
    ~Reset() {
      if (counts_) --host_.reset_nesting_;
    }
    Reset(const Reset&) = delete;
    Reset& operator=(const Reset&) = delete;

   private:
    LuaHost& host_;
    bool counts_;
  };

  // The library's own function, kept as upvalue `index`, called on this
  // frame: no extra C call is stacked, so Lua's C-stack accounting is as it
  // was without the guard.
  static int call_library(lua_State* L, int index) {
    return lua_tocfunction(L, lua_upvalueindex(index))(L);
  }

  static int resume(lua_State* L) {
    lua_State* coroutine = lua_tothread(L, 1);
    if (coroutine != nullptr) refuse_when_stopped(L, "coroutine.resume");
    Running running(L, coroutine);
    return call_library(L, 1);
  }

  // Resets the coroutine: counted.
  static int close(lua_State* L) {
    lua_State* coroutine = lua_tothread(L, 1);
    if (coroutine != nullptr) refuse_when_stopped(L, "coroutine.close");
    Reset reset(L, coroutine != nullptr, "coroutine.close");
    Running running(L, coroutine);
    return call_library(L, 1);
  }

  // Returns the library's wrap function, guarded. Its upvalue 1 is the
  // coroutine, which the library function reads; upvalue 2 is the library
  // function itself.
  static int wrap(lua_State* L) {
    call_library(L, 1);
    lua_getupvalue(L, -1, 1);
    lua_insert(L, -2);
    lua_pushcclosure(L, cxx_boundary<wrapped>, 2);
    return 1;
  }

  // Resumes the coroutine; called on a coroutine that died by an error, the
  // library function resets it with a stale C-call count: counted.
  static int wrapped(lua_State* L) {
    lua_State* coroutine = lua_tothread(L, lua_upvalueindex(1));
    refuse_when_stopped(L, "a coroutine.wrap function");
    const int status = lua_status(coroutine);
    Reset reset(L, status != LUA_OK && status != LUA_YIELD,
                "coroutine.wrap function calls on coroutines that died by an error");
    Running running(L, coroutine);
    return call_library(L, 2);
  }

  static void attach(LuaHost& h, lua_State* L) {
    h.main_threads_.push_back(L);
    if (h.stopped()) lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1);
  }

  static void detach(LuaHost& h, lua_State* L) { std::erase(h.main_threads_, L); }

  // lua_WarnFunction. Control messages ("@on", "@off") are ignored: every
  // warning goes to the host's sink. Called from inside Lua, so nothing may
  // escape; a warning that cannot be delivered is dropped.
  static void warn(void* ud, const char* message, int to_continue) noexcept {
    auto& context = *static_cast<StateContext*>(ud);
    try {
      const std::string_view piece(message);
      const bool control = !context.warning_continues && !to_continue && piece.starts_with('@');
      context.warning_continues = to_continue != 0;
      if (control) return;
      const std::size_t room = LuaHost::kMaxWarningBytes - context.warning.size();
      context.warning.append(piece.substr(0, room));
      context.warning_cut = context.warning_cut || piece.size() > room;
      if (to_continue) return;
      std::string text = std::move(context.warning);
      const bool cut = context.warning_cut;
      context.warning.clear();
      context.warning_cut = false;
      deliver(context, text, cut);
    } catch (...) {
      context.warning.clear();
      context.warning_cut = false;
    }
  }

  // One sink call per line, so that no line of a warning can pose as
  // anything but a warning.
  static void deliver(const StateContext& context, std::string_view text, bool cut) {
    const auto& sink = context.host->warnings_;
    if (!sink) return;
    std::vector<std::string> lines;
    for (std::size_t start = 0; start < text.size();) {
      const std::size_t end = std::min(text.find_first_of("\r\n", start), text.size());
      if (end > start) lines.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
    if (lines.empty()) lines.emplace_back();
    if (cut) lines.back() += " [cut at " + std::to_string(LuaHost::kMaxWarningBytes) + " bytes]";
    for (const auto& line : lines) sink(context.origin, line);
  }
};

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
  (*call->body)(L);
  return 0;
}

// Runs inside an outer pcall so that allocating the handler closure is itself
// protected; the inner pcall carries the handler.
int trampoline(lua_State* L) {
  auto* call = static_cast<ProtectedCall*>(lua_touserdata(L, 1));
  lua_pushlightuserdata(L, call);
  lua_pushcclosure(L, cxx_boundary<message_handler>, 1);
  const int handler = lua_gettop(L);
  lua_pushcfunction(L, cxx_boundary<run_body>);
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

// Replaces the field `name` of the table on top of the stack with `guard`,
// which gets the library's function as its upvalue 1.
void guard_field(lua_State* L, const char* name, lua_CFunction guard) {
  lua_getfield(L, -1, name);
  lua_pushcclosure(L, guard, 1);
  lua_setfield(L, -2, name);
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

  lua_pushglobaltable(L);
  guard_field(L, "load", cxx_boundary<text_only_load>);
  lua_pop(L, 1);

  lua_getglobal(L, LUA_STRLIBNAME);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);

  lua_getglobal(L, LUA_COLIBNAME);
  guard_field(L, "resume", cxx_boundary<HostAccess::resume>);
  guard_field(L, "close", cxx_boundary<HostAccess::close>);
  guard_field(L, "wrap", cxx_boundary<HostAccess::wrap>);
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
  lua_pushcclosure(L, cxx_boundary<deterministic_randomseed>, 3);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
}

// The panic function: the error message may be the candidate's text, and the
// child's stderr is for its own diagnostics, so a fixed line goes there. Lua
// aborts when this returns.
int panic(lua_State*) {
  static constexpr char kLine[] =
      "forktrial: the Lua interpreter panicked: an error was raised outside every protected "
      "call; aborting\n";
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, kLine, sizeof kLine - 1);
  return 0;
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
  const bool grows = new_size > old_bytes;
  const Request request{ptr, old_size, new_size};
  if (cap->limit_ != 0 && grows && cap->used_ - old_bytes + new_size > cap->limit_) {
    return cap->refuse(request, false);
  }
  void* block = std::realloc(ptr, new_size);
  if (block == nullptr) return cap->refuse(request, true);
  // Shrinks happen during the emergency collection, between a refusal and its
  // retry; only a growing request settles a pending refusal.
  if (grows) cap->settle(request);
  cap->used_ = cap->used_ - old_bytes + new_size;
  return block;
}

void* MemoryCap::refuse(const Request& request, bool by_system) noexcept {
  ++refusals_;
  if (pending_) {
    // Either Lua's retry failed too, or the previous refusal was never
    // retried: both are exhaustion.
    note_exhaustion(*pending_ == request ? by_system : pending_by_system_);
  }
  pending_ = request;
  pending_by_system_ = by_system;
  if (observer_ != nullptr) observer_->refused();
  return nullptr;
}

void MemoryCap::settle(const Request& request) noexcept {
  if (!pending_) return;
  const bool retried = *pending_ == request;
  if (!retried) note_exhaustion(pending_by_system_);
  pending_.reset();
  if (retried && !exhausted_ && observer_ != nullptr) observer_->recovered();
}

void MemoryCap::note_exhaustion(bool by_system) noexcept {
  if (exhausted_) return;
  exhausted_ = true;
  exhausted_by_system_ = by_system;
}

bool MemoryCap::exhausted_below_cap() const {
  if (exhausted_) return exhausted_by_system_;
  return pending_.has_value() && pending_by_system_;
}

LuaHost::LuaHost(std::size_t memory_cap_bytes, WarningSink warnings)
    : memory_(memory_cap_bytes, this), warnings_(std::move(warnings)) {}

LuaHost::~LuaHost() = default;

std::string LuaHost::memory_problem() const {
  if (outside_cap_) {
    return outside_cap_->empty() ? "memory outside the Lua cap ran out" : *outside_cap_;
  }
  if (!memory_.exhausted()) return {};
  const std::string cap = std::to_string(memory_.limit());
  if (memory_.limit() == 0) return "Lua could not allocate memory: the process ran out of memory";
  if (memory_.exhausted_below_cap()) {
    return "Lua could not allocate memory below its cap of " + cap +
           " bytes: the process ran out of memory";
  }
  return "the Lua memory cap of " + cap + " bytes was reached";
}

std::string LuaHost::stop_message() const {
  const char* why = memory_exhausted() ? kMemoryRanOut : stop_reason_;
  return std::string("the runtime has stopped (") + (why != nullptr ? why : "") +
         "); no more Lua code runs in this trial";
}

void LuaHost::out_of_memory(std::string what) {
  if (!outside_cap_) outside_cap_.emplace(std::move(what));
  set_stop_hooks(true);
}

void LuaHost::stop(const char* reason) {
  if (stop_reason_ == nullptr) stop_reason_ = reason;
  set_stop_hooks(true);
}

void LuaHost::refused() noexcept {
  set_stop_hooks(true);
}

void LuaHost::recovered() noexcept {
  if (!stopped()) set_stop_hooks(false);
}

void LuaHost::set_stop_hooks(bool on) noexcept {
  for (const auto* threads : {&main_threads_, &running_}) {
    for (lua_State* thread : *threads) {
      if (on) {
        lua_sethook(thread, HostAccess::stop_hook, LUA_MASKCOUNT, 1);
      } else {
        lua_sethook(thread, nullptr, 0, 0);
      }
    }
  }
}

void LuaStateCloser::operator()(lua_State* L) const {
  StateContext* context = &context_of(L);
  lua_close(L);
  HostAccess::detach(*context->host, L);
  delete context;
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

std::expected<LuaStatePtr, Status> new_confined_state(LuaHost& host, std::uint64_t random_seed,
                                                      std::string origin) {
  auto context = std::make_unique<StateContext>();
  context->host = &host;
  context->origin = std::move(origin);
  lua_State* L = lua_newstate(&MemoryCap::allocate, &host.memory());
  if (L == nullptr) {
    return failure(ErrorCode::internal, "cannot create a Lua state within the memory cap of " +
                                            std::to_string(host.memory().limit()) + " bytes");
  }
  *static_cast<StateContext**>(lua_getextraspace(L)) = context.get();
  lua_setwarnf(L, HostAccess::warn, context.get());
  lua_atpanic(L, panic);
  LuaStatePtr state(L);
  context.release();  // owned by the state from here on
  HostAccess::attach(host, L);
  if (auto failed = run_protected(L, [&](lua_State* S) { open_libraries(S, random_seed); })) {
    return failure(ErrorCode::internal, "cannot open the Lua libraries: " + failed->message);
  }
  return state;
}

std::optional<LuaFailure> run_protected(lua_State* L, const std::function<void(lua_State*)>& body) {
  ProtectedCall call{&body, std::nullopt, {}};
  const int top = lua_gettop(L);
  lua_pushcfunction(L, cxx_boundary<trampoline>);
  lua_pushlightuserdata(L, &call);
  const int status = lua_pcall(L, 1, 0, 0);
  if (status != LUA_OK) call.failure = LuaFailure{status, value_text(L, -1), {}};
  lua_settop(L, top);
  if (call.failure) call.failure->traceback = trim_traceback(call.failure->traceback);
  return call.failure;
}

void report_out_of_memory(lua_State* L, std::string what) {
  HostAccess::host(L).out_of_memory(std::move(what));
}

int call_across_boundary(lua_State* L, LuaCFunction body) {
  bool out_of_memory = false;
  std::string message;
  try {
    return body(L);
  } catch (const std::bad_alloc&) {
    out_of_memory = true;
  } catch (const std::exception& e) {
    try {
      message = e.what();
    } catch (const std::bad_alloc&) {
      out_of_memory = true;
    }
  }
  // Raised outside the handlers, once the C++ exception is gone.
  if (out_of_memory) {
    try {
      report_out_of_memory(L, "a C++ allocation failed (std::bad_alloc) in a Lua API call");
    } catch (const std::bad_alloc&) {
      report_out_of_memory(L, {});
    }
    message = kMemoryRanOut;
  }
  luaL_where(L, 1);
  lua_pushlstring(L, message.data(), message.size());
  lua_concat(L, 2);
  return lua_error(L);
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
