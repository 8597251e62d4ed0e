// The confined Lua host (internal to the runtime): state creation, the shared
// allocator cap, the stop that ends every state's Lua code, the guards around
// coroutines, the boundary that keeps C++ exceptions out of Lua, and
// protected execution that captures a traceback.
//
// A confined state has only the base library (without dofile and loadfile,
// and with `load` forced to text mode so binary chunks are refused), table,
// string (without string.dump), math, utf8 and coroutine. There is no io, os,
// debug or package library. math.random is seeded from the given seed, and
// math.randomseed() without arguments restores that seed instead of reading
// the time. `warn` writes to the host's warning sink, never to stderr; a Lua
// panic writes a fixed line to stderr and aborts. `require`, `print` and the
// `forktrial` table are installed by the runtime, which knows the pack.
//
// Nothing here is thread-safe: the states of one host run on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

struct lua_State;

namespace forktrial::runtime {

// lua_CFunction, without including Lua.
using LuaCFunction = int (*)(lua_State*);

// One byte budget shared by every Lua state of a runtime: the lua_Alloc of
// those states. A limit of 0 means no cap. Must outlive the states that use
// it.
//
// Exhaustion. When an allocation fails (beyond the cap, or refused by the
// system), Lua usually runs an emergency full collection and asks for the
// same block again. A refusal that this retry satisfies was garbage, not
// exhaustion: the live data fits. Memory is exhausted when
//   - the retry of a refused request is refused too (the same request twice
//     in a row: only frees and shrinks can come between them, since the
//     emergency collection runs no finalizers), or
//   - a refused request is never retried: the next growing request is a
//     different one, or exhausted() is asked first. Lua does not retry where
//     it cannot collect, and lauxlib's buffers (string.rep, table.concat,
//     string.format, gsub) call the allocator directly and raise at once.
// Exhaustion is sticky. It counts even where Lua tolerates the failure (a
// string table that cannot grow): the live data then fills the cap.
class MemoryCap {
 public:
  // Told about refusals from inside the allocator, in the middle of a Lua
  // operation: it must not throw, allocate through Lua or call any Lua
  // function but lua_sethook.
  class Observer {
   public:
    virtual void refused() noexcept = 0;    // a request was refused; it may yet be retried
    virtual void recovered() noexcept = 0;  // the retry of the refused request succeeded
   protected:
    ~Observer() = default;
  };

  explicit MemoryCap(std::size_t limit_bytes, Observer* observer = nullptr)
      : limit_(limit_bytes), observer_(observer) {}
  MemoryCap(const MemoryCap&) = delete;
  MemoryCap& operator=(const MemoryCap&) = delete;

  // The lua_Alloc function; `ud` is the MemoryCap.
  static void* allocate(void* ud, void* ptr, std::size_t old_size, std::size_t new_size) noexcept;

  std::size_t limit() const { return limit_; }
  std::size_t used() const { return used_; }
  // Requests refused so far, whether or not a retry then succeeded.
  std::uint64_t refusals() const { return refusals_; }
  // Memory ran out for real (see above).
  bool exhausted() const { return exhausted_ || pending_.has_value(); }
  // Exhausted because the system, not the cap, refused (RLIMIT_AS).
  bool exhausted_below_cap() const;

 private:
  struct Request {
    const void* block;
    std::size_t old_size;
    std::size_t new_size;
    bool operator==(const Request&) const = default;
  };
  void* refuse(const Request& request, bool by_system) noexcept;
  void settle(const Request& request) noexcept;
  void note_exhaustion(bool by_system) noexcept;

  std::size_t limit_;
  Observer* observer_;
  std::size_t used_ = 0;
  std::uint64_t refusals_ = 0;
  std::optional<Request> pending_;  // the last refusal, until its retry or the next request
  bool pending_by_system_ = false;
  bool exhausted_ = false;
  bool exhausted_by_system_ = false;
};

// What every Lua state of one runtime shares: the memory cap, the stop that
// ends their Lua code, the guard on thread resets, and the sink for
// warnings. Created before the states (new_confined_state registers each)
// and destroyed after them.
//
// Stopping. Once memory runs out (the cap is exhausted, or out_of_memory()
// reports memory outside it) or stop() is called, no more Lua code runs in
// any state of the host: every Lua instruction raises "the runtime has
// stopped", so code that catches errors (pcall, xpcall, coroutines, __close)
// cannot keep running. No hook is installed while nothing has stopped; when
// a stop may begin (a refused allocation, before Lua's retry), the host sets
// a count hook firing on every instruction on each state's main thread and
// on every coroutine currently running through coroutine.resume, a
// coroutine.wrap function or coroutine.close, and removes it if the retry
// succeeds. Coroutines not running at that moment cannot start again: those
// three functions raise once the host has stopped, and new coroutines
// inherit the hook of the thread that creates them.
//
// Thread resets. Lua 5.4.4's lua_resetthread (coroutine.close, and a
// coroutine.wrap function called on a coroutine that died by an error) runs
// the coroutine's pending __close handlers without carrying the C-call count
// of the caller, so nesting them grows the C stack unchecked until the
// process crashes. The host counts such resets in progress and refuses one
// nested deeper than kMaxResetNesting: the refusal is a memory limit (the C
// stack) and stops the runtime.
class LuaHost final : private MemoryCap::Observer {
 public:
  // Receives each warning a state issues through `warn`, one line at a time
  // (a warning with line breaks arrives as several), with the origin given
  // to new_confined_state.
  using WarningSink = std::function<void(std::string_view origin, std::string_view line)>;

  // Resets nested deeper than this are refused. Lua itself allows about 200
  // C calls per reset, so the C stack holds kMaxResetNesting of those on top
  // of each other.
  static constexpr int kMaxResetNesting = 8;
  // A warning is cut after this many bytes (the rest of it is dropped).
  static constexpr std::size_t kMaxWarningBytes = 4096;

  LuaHost(std::size_t memory_cap_bytes, WarningSink warnings);
  LuaHost(const LuaHost&) = delete;
  LuaHost& operator=(const LuaHost&) = delete;
  ~LuaHost();

  MemoryCap& memory() { return memory_; }
  const MemoryCap& memory() const { return memory_; }

  // Memory ran out: the cap is exhausted, or out_of_memory() was reported.
  bool memory_exhausted() const { return memory_.exhausted() || outside_cap_.has_value(); }
  // What ran out, for messages: "the Lua memory cap of N bytes was reached",
  // what out_of_memory() reported, ...; empty while memory has not run out.
  std::string memory_problem() const;
  bool stopped() const { return memory_exhausted() || stop_reason_ != nullptr; }
  // The error Lua code gets once the host has stopped (without the position
  // Lua prefixes to it).
  std::string stop_message() const;

  // Reports memory that ran out outside the Lua cap: a C++ allocation that
  // failed on Lua's behalf, a conversion past its limits, the C-stack guard.
  // `what` says which (the first report is kept). Stops the host.
  void out_of_memory(std::string what);
  // Stops the host for another reason (a static string, e.g. "the event sink
  // failed"); the first reason is kept.
  void stop(const char* reason);

 private:
  friend struct HostAccess;  // lua_host.cc: the hooks and library wrappers

  void refused() noexcept override;
  void recovered() noexcept override;
  void set_stop_hooks(bool on) noexcept;

  MemoryCap memory_;
  WarningSink warnings_;
  std::optional<std::string> outside_cap_;
  const char* stop_reason_ = nullptr;
  std::vector<lua_State*> main_threads_;  // of every live state
  std::vector<lua_State*> running_;       // coroutines entered through the guarded functions
  int reset_nesting_ = 0;
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

// Creates a confined state of `host`, allocating from its cap; `origin`
// names the state in warnings. Fails when the cap does not leave room for the
// standard libraries.
std::expected<LuaStatePtr, Status> new_confined_state(LuaHost& host, std::uint64_t random_seed,
                                                      std::string origin);

// Runs `body` on `L` in protected mode. Lua errors raised in it (including
// memory errors on the cap) and std::exceptions thrown by it are returned as
// a LuaFailure (std::bad_alloc also reports the host out of memory); the
// stack is left as it was.
std::optional<LuaFailure> run_protected(lua_State* L, const std::function<void(lua_State*)>& body);

// Reports memory that ran out outside the Lua cap on behalf of the state `L`
// (see LuaHost::out_of_memory); does nothing for a state not made by
// new_confined_state.
void report_out_of_memory(lua_State* L, std::string what);

// The C++/Lua boundary. lua5.4-c++'s lua_pcall catches every C++ exception,
// so one escaping a lua_CFunction would become an ordinary error that Lua
// code can catch. Calls `body` and converts instead: std::bad_alloc reports
// the host out of memory (which stops it) and raises; any other
// std::exception raises a Lua error with its message, prefixed with the
// calling Lua code's position. Lua's own errors pass through untouched.
// Register every lua_CFunction as cxx_boundary<F>.
int call_across_boundary(lua_State* L, LuaCFunction body);
template <LuaCFunction Body>
int cxx_boundary(lua_State* L) {
  return call_across_boundary(L, Body);
}

// A 64-bit FNV-1a hash of `text`, used to derive seeds from the trial id.
std::uint64_t seed_from(std::string_view text);

}  // namespace forktrial::runtime
