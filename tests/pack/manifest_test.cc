// manifest.toml validation: one test per rule, each asserting the exact text.
#include "pack/manifest.h"

#include <catch2/catch.hpp>
#include <regex>

using namespace forktrial::pack;

namespace {

const std::string kHash = "sha256:" + std::string(64, 'a');

const std::string kValid = R"([pack]
name = "greeter"
version = "0.1.0"
description = "Greets every new goal."
license = "Apache-2.0"

[pack.provenance]
authored_by = "agent"

[pack.integrity]
content_hash = ")" + kHash +
                           R"("
signature = ""

[dependencies]
activegraph = ">=1.5,<2"

[surface]
object_types = ["greeting"]
relation_types = []
behaviors = ["greeter"]
tools = []
settings_schema = ""
capabilities = [{ name = "write_greeting", risk = "low", action_class = "write" }]
consumes = ["goal.created"]

[fixtures]
entrypoint = "scenarios/smoke.lua"
deterministic = true

[runtime]
language = "lua"
entry = "pack.lua"
)";

// kValid with the first occurrence of `from` replaced by `to`.
std::string with(const std::string& from, const std::string& to) {
  std::string text = kValid;
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return text;
}

std::vector<std::string> problems(const std::string& text,
                                  RuntimeRequirement runtime = RuntimeRequirement::optional) {
  auto result = parse_manifest(text, "manifest.toml", runtime);
  REQUIRE_FALSE(result.has_value());
  std::vector<std::string> out;
  for (const auto& issue : result.error().issues) out.push_back(issue.text());
  return out;
}

using Lines = std::vector<std::string>;

}  // namespace

TEST_CASE("a complete manifest validates and every field is read", "[pack][manifest]") {
  auto m = parse_manifest(kValid, "manifest.toml", RuntimeRequirement::required);
  REQUIRE(m.has_value());
  CHECK(m->name == "greeter");
  CHECK(m->version == "0.1.0");
  CHECK(m->authored_by == "agent");
  CHECK(m->content_hash.str() == kHash);
  CHECK(m->runtime_range == ">=1.5,<2");
  CHECK(m->runtime_range_key == "activegraph");
  CHECK(m->surface.object_types == Lines{"greeting"});
  CHECK(m->surface.behaviors == Lines{"greeter"});
  CHECK(m->surface.consumes == Lines{"goal.created"});
  REQUIRE(m->surface.capabilities.size() == 1);
  CHECK(m->surface.capabilities[0].action_class == "write");
  REQUIRE(m->fixtures);
  CHECK(m->fixtures->entrypoint == "scenarios/smoke.lua");
  REQUIRE(m->runtime);
  CHECK(m->runtime->entry == "pack.lua");
  CHECK(m->warnings.empty());
}

TEST_CASE("manifest: invalid TOML names line and column", "[pack][manifest]") {
  auto p = problems("[pack\nname = 1\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0].starts_with("manifest.toml: not valid TOML (line 1, column "));
}

TEST_CASE("manifest: missing [pack] table", "[pack][manifest]") {
  CHECK(problems("[dependencies]\nforktrial = \"*\"\n[surface]\n") ==
        Lines{"pack: missing table; add a [pack] table"});
}

TEST_CASE("manifest: pack.name must be a lowercase identifier", "[pack][manifest]") {
  CHECK(problems(with("\"greeter\"", "\"Greeter-Pack\"")) ==
        Lines{"pack.name: must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, "
              "at most 64 characters), got \"Greeter-Pack\""});
  CHECK(problems(with("name = \"greeter\"\n", "")) ==
        Lines{"pack.name: missing; add name = \"...\""});
  CHECK(problems(with("\"greeter\"", "7")) == Lines{"pack.name: must be a string, got an integer"});
}

TEST_CASE("manifest: pack.version must be a semantic version", "[pack][manifest]") {
  CHECK(problems(with("\"0.1.0\"", "\"1.2\"")) ==
        Lines{"pack.version: must be a semantic version like \"1.2.3\", got \"1.2\""});
  CHECK(problems(with("\"0.1.0\"", "\"01.2.3\"")) ==
        Lines{"pack.version: must be a semantic version like \"1.2.3\", got \"01.2.3\""});
  auto pre = parse_manifest(with("\"0.1.0\"", "\"1.0.0-rc.1+build.5\""), "m",
                            RuntimeRequirement::optional);
  CHECK(pre.has_value());
}

TEST_CASE("manifest: description and license must not be empty", "[pack][manifest]") {
  CHECK(problems(with("\"Greets every new goal.\"", "\"  \"")) ==
        Lines{"pack.description: must not be empty"});
  CHECK(problems(with("license = \"Apache-2.0\"\n", "")) ==
        Lines{"pack.license: missing; add license = \"...\""});
}

TEST_CASE("manifest: provenance.authored_by is human or agent", "[pack][manifest]") {
  CHECK(problems(with("\"agent\"", "\"robot\"")) ==
        Lines{"pack.provenance.authored_by: must be one of \"human\", \"agent\", got \"robot\""});
  CHECK(problems(with("[pack.provenance]\nauthored_by = \"agent\"\n", "")) ==
        Lines{"pack.provenance: missing table; add a [pack.provenance] table"});
}

TEST_CASE("manifest: integrity.content_hash must be a well-formed hash", "[pack][manifest]") {
  CHECK(problems(with(kHash, "sha256:XYZ")) ==
        Lines{"pack.integrity.content_hash: malformed hash \"sha256:XYZ\": it must have exactly "
              "64 hex digits after \"sha256:\", found 3; it is \"sha256:\" followed by the 64 "
              "lowercase hex digits of the pack's content hash"});
}

TEST_CASE("manifest: a non-empty signature is rejected, never skipped", "[pack][manifest]") {
  CHECK(problems(with("signature = \"\"", "signature = \"MEUCIQ...\"")) ==
        Lines{"pack.integrity.signature: is reserved and must be empty: signed packs are not "
              "supported, and a signature is rejected rather than accepted unchecked; remove it "
              "or set it to \"\""});
}

TEST_CASE("manifest: the runtime range comes from forktrial or activegraph", "[pack][manifest]") {
  CHECK(problems(with("activegraph = \">=1.5,<2\"\n", "")) ==
        Lines{"dependencies: missing the runtime version range; add forktrial = \">=0.1\" (or "
              "activegraph = \"...\") under [dependencies]"});
  auto own = parse_manifest(with("activegraph = \">=1.5,<2\"", "forktrial = \">=0.1\""), "m",
                            RuntimeRequirement::optional);
  REQUIRE(own);
  CHECK(own->runtime_range == ">=0.1");
  CHECK(own->runtime_range_key == "forktrial");
  CHECK(problems(with("\">=1.5,<2\"", "\"latest\"")) ==
        Lines{"dependencies.activegraph: is not a version range: \"latest\"; write "
              "comma-separated clauses like \">=1.0,<2\" or \"*\""});
  CHECK(problems(with("activegraph = \">=1.5,<2\"", "activegraph = \">=1.5\"\nother = 3")) ==
        Lines{"dependencies.other: must be a version range string like \">=1.0,<2\", got an "
              "integer"});
}

TEST_CASE("manifest: surface lists hold distinct names", "[pack][manifest]") {
  CHECK(problems(with("object_types = [\"greeting\"]", "object_types = \"greeting\"")) ==
        Lines{"surface.object_types: must be an array of strings, got a string"});
  CHECK(problems(with("behaviors = [\"greeter\"]", "behaviors = [\"greeter\", \"greeter\"]")) ==
        Lines{"surface.behaviors[1]: \"greeter\" is listed twice; list each name once"});
  CHECK(problems(with("tools = []", "tools = [\"a b\", 3]")) ==
        Lines{"surface.tools[0]: must be a non-empty name without whitespace, got \"a b\"",
              "surface.tools[1]: must be a string, got an integer"});
  CHECK(problems(with("[surface]", "[surface_x]")) ==
        Lines{"surface: missing table; add a [surface] table"});
}

TEST_CASE("manifest: capabilities carry a risk and an action class", "[pack][manifest]") {
  CHECK(problems(with("risk = \"low\"", "risk = \"extreme\"")) ==
        Lines{"surface.capabilities[0].risk: must be one of \"low\", \"medium\", \"high\", got "
              "\"extreme\""});
  CHECK(problems(with(", action_class = \"write\"", "")) ==
        Lines{"surface.capabilities[0].action_class: missing; add action_class = \"...\""});
  CHECK(problems(with("capabilities = [{", "capabilities = [\"x\", {")) ==
        Lines{"surface.capabilities[0]: must be a table { name = \"...\", risk = \"low\", "
              "action_class = \"read\" }, got a string"});
}

TEST_CASE("manifest: fixtures.entrypoint stays inside the pack", "[pack][manifest]") {
  CHECK(problems(with("\"scenarios/smoke.lua\"", "\"../outside.lua\"")) ==
        Lines{"fixtures.entrypoint: must be a relative path inside the pack (no leading '/', no "
              "'..' or '.' components, '/' as separator), got \"../outside.lua\""});
  CHECK(problems(with("deterministic = true", "deterministic = \"yes\"")) ==
        Lines{"fixtures.deterministic: must be true or false, got a string"});
}

TEST_CASE("manifest: [runtime] is required only for execution", "[pack][manifest]") {
  std::string without = with("[runtime]\nlanguage = \"lua\"\nentry = \"pack.lua\"\n", "");
  CHECK(parse_manifest(without, "m", RuntimeRequirement::optional).has_value());
  CHECK(problems(without, RuntimeRequirement::required) ==
        Lines{"runtime: missing table: a pack to be executed needs [runtime] with language = "
              "\"lua\" and entry = \"pack.lua\""});
  CHECK(problems(with("\"lua\"", "\"python\"")) ==
        Lines{"runtime.language: must be one of \"lua\", got \"python\""});
  CHECK(problems(with("\"pack.lua\"", "\"/etc/passwd\"")) ==
        Lines{"runtime.entry: must be a relative path inside the pack (no leading '/', no '..' "
              "or '.' components, '/' as separator), got \"/etc/passwd\""});
  CHECK(problems(with("\"pack.lua\"", "\"pack.py\"")) ==
        Lines{"runtime.entry: must name a .lua file, got \"pack.py\""});
}

TEST_CASE("manifest: every violation is reported at once, in document order", "[pack][manifest]") {
  std::string text = with("\"greeter\"", "\"Bad Name\"");
  text = std::regex_replace(text, std::regex("\"0\\.1\\.0\""), "\"x\"");
  text = std::regex_replace(text, std::regex("\"agent\""), "\"nobody\"");
  auto result = parse_manifest(text, "pack/manifest.toml", RuntimeRequirement::optional);
  REQUIRE_FALSE(result);
  REQUIRE(result.error().issues.size() == 3);
  CHECK(result.error().issues[0].field == "pack.name");
  CHECK(result.error().issues[1].field == "pack.version");
  CHECK(result.error().issues[2].field == "pack.provenance.authored_by");
  CHECK(result.error().message().starts_with("pack/manifest.toml: 3 problems:\n  pack.name: "));
}

TEST_CASE("manifest: unknown keys are warnings, not errors", "[pack][manifest]") {
  auto m = parse_manifest(with("[pack]\n", "[pack]\nhomepage = \"x\"\n") + "\n[extra]\na = 1\n",
                          "m", RuntimeRequirement::optional);
  REQUIRE(m);
  REQUIRE(m->warnings.size() == 2);
  CHECK(m->warnings[0].field == "extra");
  CHECK(m->warnings[1].text() ==
        "pack.homepage: unknown key; forktrial ignores it (check the spelling)");
}

TEST_CASE("confined relative paths", "[pack][manifest]") {
  CHECK(is_confined_relative_path("a/b.lua"));
  CHECK_FALSE(is_confined_relative_path(""));
  CHECK_FALSE(is_confined_relative_path("/a"));
  CHECK_FALSE(is_confined_relative_path("a/../b"));
  CHECK_FALSE(is_confined_relative_path("./a"));
  CHECK_FALSE(is_confined_relative_path("a//b"));
  CHECK_FALSE(is_confined_relative_path("a\\b"));
}
