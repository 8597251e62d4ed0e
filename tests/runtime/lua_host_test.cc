// The Lua host: when the memory cap counts as exhausted, the stop that ends
// every state's Lua code, the C++/Lua boundary, the guard on nested thread
// resets, warnings and the panic function.
#include "runtime/lua_host.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <lua.hpp>
#include <stdexcept>

#include "tests/runtime/runtime_test_support.h"

using forktrial::runtime::LuaHost;
using forktrial::runtime::MemoryCap;
using forktrial::testing::HostedLua;

namespace {

struct CountingObserver final : MemoryCap::Observer {
  int refusals = 0;
  int recoveries = 0;
  void refused() noexcept override { ++refusals; }
  void recovered() noexcept override { ++recoveries; }
};

// Lua's type tag, passed as the old size of a new block.
constexpr std::size_t kNewTable = LUA_TTABLE;

void* allocate(MemoryCap& cap, void* block, std::size_t old_size, std::size_t new_size) {
  return MemoryCap::allocate(&cap, block, old_size, new_size);
}

constexpr const char* kHoard = R"(
function hoard()
  local kept = {}
  for i = 1, math.maxinteger do kept[i] = string.rep("x", 4096) .. i end
end
)";

}  // namespace

TEST_CASE("a refusal that Lua's retry satisfies is not exhaustion", "[runtime][host][memory]") {
  CountingObserver observer;
  MemoryCap cap(1000, &observer);
  void* garbage = allocate(cap, nullptr, kNewTable, 800);
  REQUIRE(garbage != nullptr);
  REQUIRE(allocate(cap, nullptr, kNewTable, 400) == nullptr);
  // The emergency collection frees and shrinks, then Lua asks again.
  void* shrunk = allocate(cap, garbage, 800, 100);
  REQUIRE(shrunk != nullptr);
  void* retried = allocate(cap, nullptr, kNewTable, 400);
  REQUIRE(retried != nullptr);
  CHECK(cap.refusals() == 1);
  CHECK_FALSE(cap.exhausted());
  CHECK(observer.refusals == 1);
  CHECK(observer.recoveries == 1);
  CHECK(cap.used() == 500);
  allocate(cap, shrunk, 100, 0);
  allocate(cap, retried, 400, 0);
  CHECK(cap.used() == 0);
}

TEST_CASE("a request refused again on Lua's retry is exhaustion, and it sticks",
          "[runtime][host][memory]") {
  CountingObserver observer;
  MemoryCap cap(1000, &observer);
  void* live = allocate(cap, nullptr, kNewTable, 800);
  REQUIRE(allocate(cap, nullptr, kNewTable, 400) == nullptr);
  REQUIRE(allocate(cap, nullptr, kNewTable, 400) == nullptr);
  CHECK(cap.exhausted());
  CHECK_FALSE(cap.exhausted_below_cap());
  allocate(cap, live, 800, 0);
  void* later = allocate(cap, nullptr, kNewTable, 400);
  REQUIRE(later != nullptr);
  CHECK(cap.exhausted());
  CHECK(cap.refusals() == 2);
  CHECK(observer.recoveries == 0);
  allocate(cap, later, 400, 0);
}

TEST_CASE("a refused request that is never retried is exhaustion", "[runtime][host][memory]") {
  MemoryCap cap(1000);
  void* live = allocate(cap, nullptr, kNewTable, 800);
  REQUIRE(allocate(cap, nullptr, kNewTable, 400) == nullptr);
  CHECK(cap.exhausted());  // asked before any retry: it was the last word
  void* other = allocate(cap, nullptr, kNewTable, 100);
  REQUIRE(other != nullptr);
  CHECK(cap.exhausted());
  allocate(cap, live, 800, 0);
  allocate(cap, other, 100, 0);
}

TEST_CASE("garbage reaching the cap is not exhaustion, caught memory errors are",
          "[runtime][host][memory]") {
  HostedLua lua(8 << 20);
  REQUIRE_FALSE(lua.run(R"(
local live = {}
for i = 1, 1500 do live[i] = string.rep("k", 4000) .. i end
-- strings under lauxlib's 1 KiB buffer, so that every refusal gets Lua's retry
for i = 1, 20000 do local garbage = { string.rep("g", 1000) .. i, string.rep("h", 1000) .. i } end
)"));
  CHECK(lua.host.memory().refusals() > 0);
  CHECK_FALSE(lua.host.memory_exhausted());
  CHECK_FALSE(lua.host.stopped());

  SECTION("refused twice, after Lua's emergency collection") {
    CHECK(lua.run(std::string(kHoard) + "pcall(hoard) survived = true"));
  }
  SECTION("refused once by a lauxlib buffer, which raises without a collection") {
    CHECK(lua.run("pcall(string.rep, 'x', 64 << 20) survived = true"));
  }
  CHECK(lua.host.memory_exhausted());
  CHECK(lua.host.memory_problem() == "the Lua memory cap of 8388608 bytes was reached");
  CHECK(lua.global("survived") == "nil");
}

TEST_CASE("a stopped host runs no more Lua code in any of its states", "[runtime][host]") {
  HostedLua lua;
  auto second = forktrial::runtime::new_confined_state(lua.host, 2, "second");
  REQUIRE(second);
  CHECK(lua_gethook(lua.state.get()) == nullptr);  // nothing is hooked before a stop

  lua.host.stop("the test stopped it");
  CHECK(lua.host.stopped());
  CHECK_FALSE(lua.host.memory_exhausted());
  CHECK(lua.host.stop_message() ==
        "the runtime has stopped (the test stopped it); no more Lua code runs in this trial");
  for (lua_State* L : {lua.state.get(), second->get()}) {
    auto failure = forktrial::runtime::run_protected(L, [](lua_State* S) {
      luaL_loadstring(S, "for i = 1, 10 do pcall(error) end ran = true");
      lua_call(S, 0, 0);
    });
    REQUIRE(failure);
    CHECK(failure->message == "[string \"for i = 1, 10 do pcall(error) end ran = true\"]:1: " +
                                  lua.host.stop_message());
  }
  CHECK(lua.global("ran") == "nil");
}

TEST_CASE("coroutine functions refuse to start a coroutine once the host stopped",
          "[runtime][host]") {
  HostedLua lua;
  REQUIRE_FALSE(lua.run(R"(
co = coroutine.create(function() coroutine.yield() end)
coroutine.resume(co)
wrapped = coroutine.wrap(function() end)
)"));
  lua.host.stop("the test stopped it");
  struct Call {
    const char* table;
    const char* function;
  };
  for (const Call call :
       {Call{"coroutine", "resume"}, Call{"coroutine", "close"}, Call{nullptr, "wrapped"}}) {
    INFO(call.function);
    // Called from C, so that no Lua instruction of a caller raises first.
    auto failure = forktrial::runtime::run_protected(lua.state.get(), [&](lua_State* L) {
      if (call.table == nullptr) {
        lua_getglobal(L, call.function);
        lua_call(L, 0, 0);
        return;
      }
      lua_getglobal(L, call.table);
      lua_getfield(L, -1, call.function);
      lua_getglobal(L, "co");
      lua_call(L, 1, 0);
    });
    REQUIRE(failure);
    CHECK(failure->message.ends_with(lua.host.stop_message()));
  }
}

namespace {

int throws_runtime_error(lua_State*) {
  throw std::runtime_error("the C++ side failed with 42");
}

int throws_bad_alloc(lua_State*) {
  throw std::bad_alloc();
}

void register_function(HostedLua& lua, const char* name, lua_CFunction function) {
  lua_pushcfunction(lua.state.get(), function);
  lua_setglobal(lua.state.get(), name);
}

}  // namespace

TEST_CASE("a std::exception crossing into Lua becomes a Lua error with its message",
          "[runtime][host][boundary]") {
  HostedLua lua;
  register_function(lua, "fails", forktrial::runtime::cxx_boundary<throws_runtime_error>);
  REQUIRE_FALSE(lua.run("ok, err = pcall(function() fails() end)"));
  CHECK(lua.global("ok") == "false");
  CHECK(lua.global("err") == "test:1: the C++ side failed with 42");
  CHECK_FALSE(lua.host.stopped());
}

TEST_CASE("std::bad_alloc crossing into Lua stops the host as out of memory",
          "[runtime][host][boundary]") {
  HostedLua lua;
  register_function(lua, "fails", forktrial::runtime::cxx_boundary<throws_bad_alloc>);
  auto failure = lua.run("local ok, err = pcall(fails) survived = err");
  REQUIRE(failure);
  CHECK(failure->message == "test:1: " + lua.host.stop_message());
  CHECK(lua.host.memory_exhausted());
  CHECK(lua.host.memory_problem() == "a C++ allocation failed (std::bad_alloc) in a Lua API call");
  CHECK(lua.global("survived") == "nil");
}

TEST_CASE("thread resets nest eight deep and the ninth stops the host",
          "[runtime][host][coroutines]") {
  const int levels = GENERATE(8, 9);
  HostedLua lua;
  auto failure = lua.run("levels = " + std::to_string(levels) + R"(
closed = 0
local function chain(n)
  local co = coroutine.create(function()
    local cc <close> = setmetatable({}, { __close = function()
      closed = closed + 1
      if n < levels then assert(coroutine.close(chain(n + 1))) end
    end })
    coroutine.yield()
  end)
  coroutine.resume(co)
  return co
end
assert(coroutine.close(chain(1)))
)");
  if (levels == 8) {
    CHECK_FALSE(failure);
    CHECK(lua.global("closed") == "8");
    CHECK_FALSE(lua.host.stopped());
  } else {
    CHECK(failure);
    CHECK(lua.global("closed") == "8");
    CHECK(lua.host.memory_problem() ==
          "coroutine.close nested more than 8 levels deep inside __close handlers; Lua 5.4.4 "
          "does not bound the C stack across such resets, so the trial stops");
  }
}

TEST_CASE("warnings reach the sink, cut at the bound", "[runtime][host]") {
  HostedLua lua;
  REQUIRE_FALSE(lua.run(R"(
warn("@on")
warn(string.rep("w", 5000))
warn("")
warn("a\r\nb", "c")
)"));
  REQUIRE(lua.warnings.size() == 4);
  CHECK(lua.warnings[0] == "test: " + std::string(4096, 'w') + " [cut at 4096 bytes]");
  CHECK(lua.warnings[1] == "test: ");
  CHECK(lua.warnings[2] == "test: a");
  CHECK(lua.warnings[3] == "test: bc");
}

TEST_CASE("a Lua panic writes a fixed line to stderr and aborts", "[runtime][host]") {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGABRT, SIG_DFL);  // not the test framework's handler
    ::dup2(out[1], STDERR_FILENO);
    HostedLua lua;
    lua_pushliteral(lua.state.get(), "candidate text");
    lua_error(lua.state.get());  // outside any protected call
    ::_exit(0);
  }
  ::close(out[1]);
  std::string written;
  char buffer[512];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) written.append(buffer, n);
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(written ==
        "forktrial: the Lua interpreter panicked: an error was raised outside every protected "
        "call; aborting\n");
}
