// The confined Lua host (internal to the runtime): state creation, the shared
// allocator cap, and protected execution that captures a traceback.
//
// A confined state has only the base library (without dofile and loadfile,
// and with `load` forced to text mode so binary chunks are refused), table,
// string (without string.dump), math, utf8 and coroutine. There is no io, os,
// debug or package library. math.random is seeded from the given seed, and
// math.randomseed() without arguments restores that seed instead of reading
// the time. `require`, `print` and the `forktrial` table are installed by the
// runtime, which knows the pack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>

struct lua_State;

namespace forktrial::runtime {

// One byte budget shared by every Lua state of a runtime. A limit of 0 means
// no cap. A refused allocation is counted; Lua turns it into a memory error
// after one emergency collection, so `refusals() > 0` means the cap was
// reached at least once. Must outlive the states that use it; not
// thread-safe (the states of one runtime run on one thread).
class MemoryCap {
 public:
  explicit MemoryCap(std::size_t limit_bytes) : limit_(limit_bytes) {}
  MemoryCap(const MemoryCap&) = delete;
  MemoryCap& operator=(const MemoryCap&) = delete;

  // The lua_Alloc function; `ud` is the MemoryCap.
  static void* allocate(void* ud, void* ptr, std::size_t old_size, std::size_t new_size) noexcept;

  std::size_t limit() const { return limit_; }
  std::size_t used() const { return used_; }
  std::uint64_t refusals() const { return refusals_; }

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
  std::uint64_t refusals_ = 0;
};

struct LuaStateCloser {
  void operator()(lua_State* L) const;
};
using LuaStatePtr = std::unique_ptr<lua_State, LuaStateCloser>;

// Why a protected call failed.
struct LuaFailure {
  int status = 0;         // LUA_ERRRUN, LUA_ERRMEM or LUA_ERRERR
  std::string message;    // the error value as text
  std::string traceback;  // "stack traceback:\n..." (empty for memory errors)
  bool out_of_memory() const;
  // "runtime_error", "memory_error" or "error_handler_error".
  std::string error_type() const;
};

// Creates a confined state allocating from `cap`. Fails when the cap does not
// leave room for the standard libraries.
std::expected<LuaStatePtr, std::string> new_confined_state(MemoryCap& cap,
                                                           std::uint64_t random_seed);

// Runs `body` on `L` in protected mode. Lua errors raised in it (including
// memory errors on the cap) and std::exceptions thrown by it are returned as
// a LuaFailure; the stack is left as it was.
std::optional<LuaFailure> run_protected(lua_State* L, const std::function<void(lua_State*)>& body);

// A 64-bit FNV-1a hash of `text`, used to derive seeds from the trial id.
std::uint64_t seed_from(std::string_view text);

}  // namespace forktrial::runtime
