// Loading packs: the manifest, the entry file, the two-way surface check, LLM
// behaviors without a provider, name conflicts and pack.loaded.
#include <catch2/catch.hpp>

#include "runtime/surface_check.h"
#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Outcome;
using forktrial::runtime::PackRole;
using nlohmann::json;

namespace {

std::vector<std::string> load_problems(Recorded& r, const std::filesystem::path& dir,
                                       PackRole role = PackRole::candidate) {
  auto loaded = r.rt->load_pack(dir, role);
  if (loaded) FAIL("the pack at " << dir << " loaded");
  return loaded.error().problems;
}

}  // namespace

TEST_CASE("pack.loaded records the pack in activegraph's layout and key order", "[runtime][load]") {
  auto r = make_runtime();
  const auto loaded = r->rt->load_pack(examples_dir() / "chat_echo", PackRole::candidate);
  REQUIRE(loaded);
  REQUIRE(loaded->name == "chat_echo");
  REQUIRE(loaded->version == "0.3.0");
  REQUIRE(loaded->loaded_event.str() == "evt_001");
  REQUIRE(r->sunk.size() == 1);
  REQUIRE(r->sunk[0].type == "pack.loaded");
  REQUIRE(r->sunk[0].actor == "runtime");
  REQUIRE_FALSE(r->sunk[0].caused_by);
  // packs/loader.py _build_pack_loaded_payload: these keys in this order,
  // capabilities with four keys each (no action_class).
  REQUIRE(nlohmann::ordered_json::parse(r->sunk[0].payload) == nlohmann::ordered_json::parse(R"({
    "name": "chat_echo", "version": "0.3.0",
    "description": "Replies to every chat message, files the replies under one thread, and retitles the thread on /topic.",
    "object_types": ["thread", "reply"], "relation_types": ["in_thread"],
    "behaviors": ["chat_echo.echo"], "tools": [], "policies": [], "prompts": {},
    "settings": {},
    "capabilities": [{"provider": "chat_echo", "capability": "write_reply",
                      "risk_class": "low", "credential_ref": ""}]
  })"));
}

TEST_CASE("the surface check lists every mismatch in both directions", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  spec.object_types = {"thread", "reply"};
  spec.relation_types = {"in_thread"};
  spec.behaviors = {"echo"};
  spec.capabilities =
      R"([{ provider = "chat", capability = "write_reply", risk_class = "low", )"
      R"(action_class = "R1" }, )"
      R"({ provider = "chat", capability = "read_all", risk_class = "low", action_class = "R0" }])";
  spec.pack_lua = R"(
local pack = forktrial.pack{ name = "candidate", version = "0.1.0",
  object_types = { "thread", "secret" }, relation_types = { "in_thread" }, tools = { "curl" },
  settings_schema = "{}",
  capabilities = { { provider = "chat", capability = "write_reply", risk_class = "high",
                      action_class = "R3", credential_ref = "chat_token" } } }
pack:behavior{ name = "spy", on = { "chat.message" }, run = function() end }
return pack
)";
  auto r = make_runtime();
  const auto problems = load_problems(*r, write_pack(dir, "p", spec));
  REQUIRE(
      problems ==
      std::vector<std::string>{
          "object type \"secret\" is registered by pack.lua but missing from manifest.toml "
          "[surface].object_types",
          "object type \"reply\" is declared in manifest.toml [surface].object_types but not "
          "registered by pack.lua",
          "behavior \"spy\" is registered by pack.lua but missing from manifest.toml "
          "[surface].behaviors",
          "behavior \"echo\" is declared in manifest.toml [surface].behaviors but not registered "
          "by "
          "pack.lua",
          "tool \"curl\" is registered by pack.lua but missing from manifest.toml [surface].tools",
          "capability \"chat.read_all\" is declared in manifest.toml [surface].capabilities but "
          "not registered by pack.lua",
          "capability \"chat.write_reply\" has risk_class \"low\" in manifest.toml but \"high\" "
          "in pack.lua",
          "capability \"chat.write_reply\" has action_class \"R1\" in manifest.toml but \"R3\" "
          "in pack.lua",
          "capability \"chat.write_reply\" has credential_ref \"\" in manifest.toml but "
          "\"chat_token\" in pack.lua",
          "settings_schema is \"\" in manifest.toml but \"{}\" in pack.lua"});
  REQUIRE(r->sunk.empty());
}

TEST_CASE("matching surfaces compare clean", "[runtime][load]") {
  forktrial::pack::Surface surface;
  surface.object_types = {"a"};
  surface.behaviors = {"b"};
  surface.capabilities = {{"p", "c", "low", "", "R0"}};
  REQUIRE(forktrial::runtime::compare_surfaces(surface, surface, "pack.lua").empty());
}

TEST_CASE("name and version must match the manifest", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  PackSpec lua = spec;
  lua.name = "impostor";
  lua.version = "9.9.9";
  spec.pack_lua = pack_header(lua) + "return pack\n";
  auto r = make_runtime();
  REQUIRE(load_problems(*r, write_pack(dir, "p", spec)) ==
          std::vector<std::string>{
              "pack.lua declares name \"impostor\" but manifest.toml [pack].name is \"candidate\"",
              "pack.lua declares version \"9.9.9\" but manifest.toml [pack].version is "
              "\"0.1.0\""});
}

TEST_CASE("an LLM behavior without a provider loads and fails the scenario that dispatches",
          "[runtime][load]") {
  // activegraph raises MissingProviderError from the entry point that would
  // dispatch (_ensure_registry), inside the scenario, not at load.
  TempDir dir;
  PackSpec spec;
  spec.behaviors = {"think"};
  spec.pack_lua = pack_header(spec) +
                  "pack:behavior{ name = 'think', on = {'goal.created'}, llm = true, "
                  "run = function() end }\nreturn pack\n";
  spec.files["s.lua"] = "function main(rt) rt:run_goal('think hard') end\n";
  const auto pack = write_pack(dir, "p", spec);
  const std::string missing =
      "MissingProviderError: behavior \"candidate.think\" is an LLM behavior (llm = true) but "
      "the trial has no LLM provider (max_llm_calls = 0); drop llm = true or give the trial an "
      "LLM budget";

  auto r = make_runtime();
  REQUIRE(r->rt->load_pack(pack, PackRole::candidate));
  const auto result = r->rt->run_scenario("s.lua");
  REQUIRE(result.outcome == Outcome::scenario_failed);
  REQUIRE(result.message == "s.lua:1: rt:run_goal: " + missing);
  REQUIRE(r->of_type("goal.created").empty());

  auto idle = make_runtime();
  REQUIRE(idle->rt->load_pack(pack, PackRole::candidate));
  const auto until_idle = idle->rt->run_scenario("");
  REQUIRE(until_idle.outcome == Outcome::scenario_failed);
  REQUIRE(until_idle.message == missing);
  REQUIRE(idle->of_type("runtime.idle").empty());

  auto config = test_config();
  config.max_llm_calls = 3;
  auto with_budget = make_runtime({}, config);
  REQUIRE(with_budget->rt->load_pack(pack, PackRole::candidate));
  REQUIRE(with_budget->rt->run_scenario("s.lua").outcome == Outcome::completed);
}

TEST_CASE("a second pack with the same name fails the load", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  spec.pack_lua = pack_header(spec) + "return pack\n";
  write_pack(dir, "one", spec);
  write_pack(dir, "two", spec);
  auto r = make_runtime();
  load_or_fail(*r, dir.path() / "one", PackRole::extra);
  const auto problems = load_problems(*r, dir.path() / "two");
  REQUIRE(problems.size() == 1);
  REQUIRE(problems[0] == "a pack named \"candidate\" (version 0.1.0, from " +
                             (dir.path() / "one").string() +
                             ") is already loaded; two packs with one name cannot share a trial");
  REQUIRE(r->sunk.size() == 1);
}

TEST_CASE("nothing loads after the candidate", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  spec.pack_lua = pack_header(spec) + "return pack\n";
  PackSpec other = spec;
  other.name = "other";
  other.pack_lua = pack_header(other) + "return pack\n";
  auto r = make_runtime();
  load_or_fail(*r, write_pack(dir, "p", spec));
  REQUIRE(load_problems(*r, write_pack(dir, "q", other), PackRole::extra) ==
          std::vector<std::string>{"the candidate pack is already loaded; extra packs load "
                                   "before it and there is only one candidate"});
}

TEST_CASE("entry files that fail or return no pack are load errors", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  auto r = make_runtime();

  spec.pack_lua = pack_header(spec) + "local x = nil\nx.field = 1\nreturn pack\n";
  auto problems = load_problems(*r, write_pack(dir, "raises", spec));
  REQUIRE(problems.size() == 1);
  REQUIRE(problems[0].starts_with(
      "pack.lua failed while loading: pack.lua:3: attempt to index a nil value (local 'x')\n"
      "stack traceback:"));

  spec.pack_lua = pack_header(spec) + "return 42\n";
  REQUIRE(load_problems(*r, write_pack(dir, "returns", spec)) ==
          std::vector<std::string>{"pack.lua failed while loading: pack.lua must "
                                   "return the pack made by forktrial.pack{...}, but returned a "
                                   "number value"});

  spec.pack_lua = "return {}\n";
  problems = load_problems(*r, write_pack(dir, "undeclared", spec));
  REQUIRE(problems[0].find("pack.lua did not call forktrial.pack{...}") != std::string::npos);

  spec.pack_lua = pack_header(spec) + "pack:behavior{ name = 'b', on = {}, run = print }\n";
  problems = load_problems(*r, write_pack(dir, "empty_on", spec));
  REQUIRE(problems[0].find("pack:behavior \"b\": field \"on\" must list at least one event "
                           "type") != std::string::npos);

  spec.pack_lua = "local p = forktrial.pack{ name = 'candidate', version = '0.1.0', objects = {} }";
  problems = load_problems(*r, write_pack(dir, "typo", spec));
  REQUIRE(problems[0].find("forktrial.pack: unknown field \"objects\"") != std::string::npos);
  REQUIRE(r->sunk.empty());
}

TEST_CASE("a manifest without [runtime] cannot be executed", "[runtime][load]") {
  TempDir dir;
  PackSpec spec;
  spec.pack_lua = pack_header(spec) + "return pack\n";
  std::string manifest = manifest_text(spec, "sha256:" + std::string(64, '0'));
  manifest.erase(manifest.find("[runtime]"));
  dir.write("p/manifest.toml", manifest);
  dir.write("p/pack.lua", spec.pack_lua);
  auto r = make_runtime();
  const auto problems = load_problems(*r, dir.path() / "p");
  REQUIRE(problems.size() == 1);
  REQUIRE(problems[0].find("runtime") != std::string::npos);
  auto error = r->rt->load_pack(dir.path() / "p", PackRole::candidate).error();
  REQUIRE(error.message.starts_with("cannot load the pack at " + (dir.path() / "p").string() +
                                    ":\n  - "));
}
