// The two-way surface check: what a pack's manifest declares against what its
// Lua code registered when it ran.
//
// Every difference is reported, in a fixed order (object types, relation
// types, behaviors, tools, capabilities, settings schema), each naming the
// item and the side it is missing from, e.g.
//   behavior "spy" is registered by pack.lua but missing from manifest.toml [surface].behaviors
//   behavior "echo" is declared in manifest.toml [surface].behaviors but not registered by pack.lua
// Capabilities are matched by provider and capability ("gmail.drafts.send")
// and then compared on risk_class, action_class and credential_ref. The manifest's `consumes` list
// is not compared: it describes the events a pack reacts to, which the Lua code states per
// behavior.
//
// Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pack/manifest.h"

namespace forktrial::runtime {

std::vector<std::string> compare_surfaces(const pack::Surface& manifest,
                                          const pack::Surface& registered,
                                          std::string_view code_label);

}  // namespace forktrial::runtime
