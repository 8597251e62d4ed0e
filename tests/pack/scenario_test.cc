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

TEST_CASE("an activegraph pack's scenario is a Python file, in activegraph's form",
          "[pack][scenario]") {
  using forktrial::pack::Executor;
  using forktrial::pack::parse_any_scenario_spec;
  using forktrial::pack::parse_scenario_spec;
  REQUIRE(parse_scenario_spec("s.py::go", Executor::activegraph)->function == "go");
  REQUIRE(parse_scenario_spec("s.py", Executor::activegraph)->function == "main");
  REQUIRE(parse_scenario_spec("s.lua", Executor::activegraph).error().message ==
          "scenario \"s.lua\" does not name a .py file; write \"path.py\" or \"path.py::fn\"");
  REQUIRE(parse_scenario_spec("s.py::a-b", Executor::activegraph).error().message ==
          "scenario \"s.py::a-b\" names the function \"a-b\", which is not a Python identifier; "
          "write \"path.py::fn\"");
  // Before the candidate is known, either form; the error is Lua's.
  REQUIRE(parse_any_scenario_spec("s.py")->path == "s.py");
  REQUIRE(parse_any_scenario_spec("s.lua")->path == "s.lua");
  REQUIRE(parse_any_scenario_spec("s.rb").error().message ==
          "scenario \"s.rb\" does not name a .lua file; write \"path.lua\" or \"path.lua::fn\"");
}
