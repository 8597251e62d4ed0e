// One loaded pack (internal to the runtime): its manifest, its confined Lua
// state and what its Lua code registered. Owned by the Runtime, which keeps it
// at a fixed address for as long as the state lives, since the state's API
// closures point back to it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pack/manifest.h"
#include "pack/pack_files.h"
#include "runtime/lua_host.h"

namespace forktrial::runtime {

class RuntimeServices;

struct BehaviorDef {
  std::string name;
  std::vector<std::string> on;  // event types, exact match
  int run_ref = 0;              // the run function, in the state's registry
  bool llm = false;
  nlohmann::ordered_json where;  // a payload filter (runtime/where.h); null = none
};

struct PackHost {
  RuntimeServices* runtime = nullptr;  // the runtime, as its Lua bindings see it
  std::filesystem::path root;
  // The pack's hashed bytes: the entry file, modules for `require` and (for
  // the candidate) scenarios are read from here, never from the directory.
  pack::PackFiles files;
  pack::Manifest manifest;
  std::string entry;  // the entry file, relative to root

  // What the Lua code declared through forktrial.pack{} and pack:behavior{}.
  bool declared = false;  // forktrial.pack{} was called
  bool sealed = false;    // the load finished: nothing more can be registered
  std::string name;
  std::string version;
  pack::Surface registered;
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
  std::vector<BehaviorDef> behaviors;
  int pack_ref = 0;  // the pack table, in the registry

  // Declared last so the state closes first, while the fields above that its
  // closures point to still exist.
  LuaStatePtr state;

  // The behavior's canonical name, activegraph's "<pack>.<behavior>": its
  // actor and the name lifecycle records give it.
  std::string actor(const BehaviorDef& behavior) const { return name + "." + behavior.name; }
};

}  // namespace forktrial::runtime
