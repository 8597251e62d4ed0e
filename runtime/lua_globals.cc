#include "runtime/lua_globals.h"

#include <algorithm>
#include <lua.hpp>
#include <string>
#include <string_view>

#include "runtime/lua_args.h"
#include "runtime/pack_host.h"
#include "runtime/runtime_services.h"

namespace forktrial::runtime {

namespace {

constexpr const char* kModules = "forktrial.modules";

int require(lua_State* L) {
  PackHost& host = host_upvalue(L);
  const std::string name = luaL_checkstring(L, 1);
  const std::string call = "require(\"" + name + "\")";
  lua_getfield(L, LUA_REGISTRYINDEX, kModules);
  const int modules = lua_gettop(L);
  lua_getfield(L, modules, name.c_str());
  if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
    raise(L, call + ": the module requires itself, directly or through other modules");
  }
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);

  if (name.empty()) raise(L, call + ": the module name is empty");
  if (name.front() == '/') raise(L, call + ": module names cannot be absolute paths");
  if (name.find("..") != std::string::npos) {
    raise(L, call + ": module names cannot leave the pack root (\"..\")");
  }
  std::string relative = name;
  std::replace(relative.begin(), relative.end(), '.', '/');
  relative += ".lua";
  std::string_view source;
  {
    auto text = host.files.lua_file(relative, call + " file");
    if (!text) raise(L, text.error().message);
    source = *text;
  }
  lua_pushboolean(L, 0);  // loading: a cycle finds false
  lua_setfield(L, modules, name.c_str());
  const std::string chunk_name = "@" + relative;
  if (luaL_loadbufferx(L, source.data(), source.size(), chunk_name.c_str(), "t") != LUA_OK) {
    lua_error(L);
  }
  push_string(L, name);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_pushnil(L);  // a failed load may be retried
    lua_setfield(L, modules, name.c_str());
    lua_error(L);
  }
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, modules, name.c_str());
  return 1;
}

// Writes `message` to the log under whoever acts for `host` now.
void log_for(PackHost& host, std::string_view message) {
  RuntimeServices& rt = *host.runtime;
  const Origin& origin = rt.origin();
  rt.log_line(origin.pack == &host ? origin.actor : host.name, message);
}

int print(lua_State* L) {
  PackHost& host = host_upvalue(L);
  std::string line;
  const int n = lua_gettop(L);
  for (int i = 1; i <= n; ++i) {
    if (i > 1) line += '\t';
    line += string_at(L, (luaL_tolstring(L, i, nullptr), -1));
    lua_pop(L, 1);
  }
  log_for(host, line);
  return 0;
}

int ctx_log(lua_State* L) {
  PackHost& host = host_upvalue(L);
  const int message = lua_istable(L, 1) && lua_gettop(L) >= 2 ? 2 : 1;  // ctx.log or ctx:log
  luaL_tolstring(L, message, nullptr);
  log_for(host, string_at(L, -1));
  return 0;
}

}  // namespace

void install_require(lua_State* L, PackHost& host) {
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, kModules);
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<require>, 1);
  lua_setglobal(L, "require");
}

void install_print(lua_State* L, PackHost& host) {
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<print>, 1);
  lua_setglobal(L, "print");
}

void push_ctx_log(lua_State* L, PackHost& host) {
  lua_pushlightuserdata(L, &host);
  lua_pushcclosure(L, cxx_boundary<ctx_log>, 1);
}

}  // namespace forktrial::runtime
