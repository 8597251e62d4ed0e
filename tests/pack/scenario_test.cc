// Scenario specifications: "path.lua" or "path.lua::fn".
#include "pack/scenario.h"

#include <catch2/catch.hpp>

TEST_CASE("scenario specs parse into path and function", "[pack][scenario]") {
  using forktrial::pack::parse_scenario_spec;
  REQUIRE(parse_scenario_spec("a/b.lua")->function == "main");
  REQUIRE(parse_scenario_spec("a/b.lua::run_it")->path == "a/b.lua");
  REQUIRE(parse_scenario_spec("a/b.lua::run_it")->function == "run_it");
  REQUIRE(parse_scenario_spec("a/b.py").error().message ==
          "scenario \"a/b.py\" does not name a .lua file; write \"path.lua\" or \"path.lua::fn\"");
  REQUIRE(parse_scenario_spec("a.lua::").error().message ==
          "scenario \"a.lua::\" names the function \"\", which is not a Lua identifier; write "
          "\"path.lua::fn\"");
}
