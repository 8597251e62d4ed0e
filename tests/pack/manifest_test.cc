// manifest.toml validation: one test per rule, each asserting the exact text.
#include "pack/manifest.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

#include "pack/toml_screen.h"

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
authors = ["Ada <ada@example.com>"]
generator = "evolution/0.3"
source_url = "https://example.com/greeter"
created_at = "2026-07-08T00:00:00Z"

[pack.integrity]
content_hash = ")" + kHash +
                           R"("
signature = ""

[dependencies]
activegraph = ">=1.5,<2"
python = ">=3.11"
python-deps = ["requests>=2"]

[dependencies.packs]
core = ">=0.1"

[dependencies.optional-packs]
chat = ">=0.1,<1"

[surface]
object_types = ["greeting"]
relation_types = []
behaviors = ["greeter"]
tools = []
settings_schema = ""
capabilities = [{ provider = "greeter", capability = "write_greeting", risk_class = "low", action_class = "R1" }]
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

Manifest valid(const std::string& text) {
  auto result = parse_manifest(text, "manifest.toml", RuntimeRequirement::optional);
  if (!result) FAIL(result.error().message);
  return *result;
}

// The messages several rules share, for the value `got`.
std::string version_problem(const std::string& got) {
  return "pack.version: must be a PEP 440 version like \"1.2.3\" or \"1.0.0rc1\", got \"" + got +
         "\"";
}
std::string range_problem(const std::string& field, const std::string& got) {
  return field + ": is not a PEP 440 version range: \"" + got +
         "\"; write comma-separated clauses, each an operator (>=, <=, >, <, ==, !=, ~=, ===) "
         "and a version, like \">=1.0,<2\"";
}
std::string action_class_problem(const std::string& got) {
  return "surface.capabilities[0].action_class: must be one of \"R0\", \"R1\", \"R2\", \"R3\", "
         "\"R4\", got \"" +
         got + "\"";
}

const std::filesystem::path kRealManifests =
    FORKTRIAL_SOURCE_DIR "/tests/pack/data/activegraph-packs";

}  // namespace

TEST_CASE("a complete manifest validates and every field is read", "[pack][manifest]") {
  auto m = parse_manifest(kValid, "manifest.toml", RuntimeRequirement::required);
  REQUIRE(m.has_value());
  CHECK(m->name == "greeter");
  CHECK(m->version == "0.1.0");
  CHECK(m->provenance.authored_by == "agent");
  CHECK(m->provenance.authors == Lines{"Ada <ada@example.com>"});
  CHECK(m->provenance.generator == "evolution/0.3");
  CHECK(m->provenance.source_url == "https://example.com/greeter");
  CHECK(m->provenance.created_at == "2026-07-08T00:00:00Z");
  REQUIRE(m->content_hash);
  CHECK(m->content_hash->str() == kHash);
  CHECK(m->dependencies.runtime_range == ">=1.5,<2");
  CHECK(m->dependencies.runtime_range_key == "activegraph");
  CHECK(m->dependencies.python_range == ">=3.11");
  CHECK(m->dependencies.python_deps == Lines{"requests>=2"});
  CHECK(m->dependencies.packs == std::map<std::string, std::string>{{"core", ">=0.1"}});
  CHECK(m->dependencies.optional_packs == std::map<std::string, std::string>{{"chat", ">=0.1,<1"}});
  CHECK(m->surface.object_types == Lines{"greeting"});
  CHECK(m->surface.behaviors == Lines{"greeter"});
  CHECK(m->surface.consumes == Lines{"goal.created"});
  REQUIRE(m->surface.capabilities.size() == 1);
  CHECK(m->surface.capabilities[0] == Capability{"greeter", "write_greeting", "low", "", "R1"});
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

TEST_CASE("manifest: a control character is refused before the TOML parser sees it",
          "[pack][manifest]") {
  // toml++ assumed a table header's key could not start with NUL (an abort
  // in a debug build, undefined behaviour in a release one).
  auto p = problems(std::string("[pack]\nname = \"x\"\n[\0\0pack.provenance]\n", 38));
  REQUIRE(p.size() == 1);
  CHECK(p[0] ==
        "manifest.toml: not valid TOML (line 3, column 2): byte 0x00 is a control character; "
        "TOML does not allow it");
}

TEST_CASE("manifest: a character outside ASCII is refused outside strings and comments only",
          "[pack][manifest]") {
  // toml++ reached code it marks unreachable for U+00D7 where a key starts.
  auto p = problems("[pack]\nwall_cl\xC3\x97 = 1\n");
  REQUIRE(p.size() == 1);
  CHECK(
      p[0].starts_with("manifest.toml: not valid TOML (line 2, column 8): byte 0xC3 is not "
                       "ASCII"));
  CHECK_FALSE(
      toml_text_problem("# a \xC3\x97 b\nk = \"\xC3\x97\"\nl = '\xC3\x97'\n"
                        "m = \"\"\"\n\xC3\x97\"\"\"\"\nn = '''\xC3\x97'''\n"));
  CHECK_FALSE(toml_text_problem("\xEF\xBB\xBFk = \"\\\"\xC3\x97\"\r\n"));
  CHECK(toml_text_problem("k = \"a\" \xC3\x97\n").has_value());
  CHECK(toml_text_problem("k = \"a\rb\"\n").has_value());
}

TEST_CASE("manifest: a closing brace where a value starts is refused as not TOML",
          "[pack][manifest]") {
  // toml++ asserted it could not be there, aborting a build without NDEBUG.
  auto p = problems("[pack]\nname = \"x\"\n[surface]\nobject_types = [}\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0].starts_with("manifest.toml: not valid TOML (line 4, column "));
}

TEST_CASE("manifest: every manifest the fuzzer found a crash with is refused", "[pack][manifest]") {
  // fuzz/regressions/manifest: text toml++ 3.3 met with a failed assertion
  // (pack/toml.h); the sanitizer pass would report it.
  const auto dir = std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "fuzz/regressions/manifest";
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(entry.path().filename().string());
    CHECK_FALSE(parse_manifest(text, "manifest.toml", RuntimeRequirement::optional).has_value());
    ++inputs;
  }
  CHECK(inputs >= 2);
}

TEST_CASE("manifest: missing [pack] table", "[pack][manifest]") {
  CHECK(problems("[dependencies]\nforktrial = \">=0.1\"\n[surface]\n") ==
        Lines{"pack: missing table; add a [pack] table"});
}

TEST_CASE("manifest: pack.name must be a lowercase identifier", "[pack][manifest]") {
  CHECK(problems(with("\"greeter\"", "\"Greeter-Pack\"")) ==
        Lines{"pack.name: must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, "
              "2 to 64 characters), got \"Greeter-Pack\""});
  CHECK(problems(with("name = \"greeter\"\n", "")) ==
        Lines{"pack.name: missing; add name = \"...\""});
  CHECK(problems(with("\"greeter\"", "7")) == Lines{"pack.name: must be a string, got an integer"});
}

TEST_CASE("manifest: pack.name has 2 to 64 characters, as activegraph requires",
          "[pack][manifest]") {
  CHECK(problems(with("\"greeter\"", "\"g\"")) ==
        Lines{"pack.name: must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, "
              "2 to 64 characters), got \"g\""});
  CHECK(valid(with("\"greeter\"", "\"g1\"")).name == "g1");
  const std::string longest = "g" + std::string(63, 'x');
  CHECK(valid(with("\"greeter\"", "\"" + longest + "\"")).name == longest);
  CHECK(problems(with("\"greeter\"", "\"" + longest + "x\"")).size() == 1);
}

TEST_CASE("manifest: pack.version must be a PEP 440 version", "[pack][manifest]") {
  CHECK(problems(with("\"0.1.0\"", "\"1.0.0-rc.1\"")) == Lines{version_problem("1.0.0-rc.1")});
  CHECK(problems(with("\"0.1.0\"", "\"1.2.x\"")) == Lines{version_problem("1.2.x")});
  CHECK(valid(with("\"0.1.0\"", "\"1.0.0rc1\"")).version == "1.0.0rc1");
  CHECK(valid(with("\"0.1.0\"", "\"1.2\"")).version == "1.2");
}

TEST_CASE("PEP 440 versions as activegraph accepts them", "[pack][manifest]") {
  for (const char* version :
       {"0", "1.2", "0.1.0", "v1.0", "1.0.0rc1", "1.0a2", "1.0b3", "2.0.post1", "2.0.dev4",
        "2.0rc1.post2.dev3", "1.0+local.7", "1.0+abc", "2024.10.1"}) {
    INFO(version);
    CHECK(is_pep440_version(version));
  }
  for (const char* version :
       {"", "v", "1.", ".1", "1..2", "1.0-rc1", "1.0rc", "1.0c1", "1.0.post", "1.0.dev", "1.0+",
        "1.0+a..b", "1.0+ABC", "V1.0", "1.0 ", " 1.0", "1.0\n", "1.0.0-alpha", "latest"}) {
    INFO(version);
    CHECK_FALSE(is_pep440_version(version));
  }
}

TEST_CASE("PEP 440 specifier sets as activegraph accepts them", "[pack][manifest]") {
  for (const char* range : {">=0.9,<2", ">=1.7.1,<2.0", "~=1.4", "==1.*", "!=1.5", "===foo",
                            "> 1 , < 2", ">=3.11", "<=2.0.post1", " >=1.0 ", ">=1.0rc1"}) {
    INFO(range);
    CHECK(is_pep440_specifier_set(range));
  }
  for (const char* range : {"", "*", "1.0", ">=", ">=1.0,", ",>=1.0", ">=1.0,,<2", "=>1.0",
                            ">=1 .0", "latest", ">=1.0;<2", "=1.0"}) {
    INFO(range);
    CHECK_FALSE(is_pep440_specifier_set(range));
  }
}

TEST_CASE("manifest: description must not be empty, license may be", "[pack][manifest]") {
  CHECK(problems(with("\"Greets every new goal.\"", "\"  \"")) ==
        Lines{"pack.description: must not be empty"});
  CHECK(valid(with("license = \"Apache-2.0\"\n", "")).license.empty());
  CHECK(valid(with("\"Apache-2.0\"", "\"\"")).license.empty());
  CHECK(problems(with("\"Apache-2.0\"", "2")) ==
        Lines{"pack.license: must be a string, got an integer"});
}

TEST_CASE("manifest: provenance.authored_by is human or agent", "[pack][manifest]") {
  CHECK(problems(with("\"agent\"", "\"robot\"")) ==
        Lines{"pack.provenance.authored_by: must be one of \"human\", \"agent\", got \"robot\""});
  std::string without = kValid.substr(0, kValid.find("[pack.provenance]")) +
                        kValid.substr(kValid.find("[pack.integrity]"));
  CHECK(problems(without) ==
        Lines{"pack.provenance: missing table; add a [pack.provenance] table"});
}

TEST_CASE("manifest: provenance authors, generator, source_url and created_at are typed",
          "[pack][manifest]") {
  CHECK(problems(with("authors = [\"Ada <ada@example.com>\"]", "authors = \"Ada\"")) ==
        Lines{"pack.provenance.authors: must be an array of strings, got a string"});
  CHECK(problems(with("authors = [\"Ada <ada@example.com>\"]", "authors = [\"Ada\", 7]")) ==
        Lines{"pack.provenance.authors[1]: must be a string, got an integer"});
  CHECK(problems(with("generator = \"evolution/0.3\"", "generator = false")) ==
        Lines{"pack.provenance.generator: must be a string, got a boolean"});
  CHECK(problems(with("source_url = \"https://example.com/greeter\"", "source_url = 1")) ==
        Lines{"pack.provenance.source_url: must be a string, got an integer"});
  CHECK(problems(with("created_at = \"2026-07-08T00:00:00Z\"", "created_at = 2026")) ==
        Lines{"pack.provenance.created_at: must be a string or a date-time like "
              "\"2026-07-08T00:00:00Z\", got an integer"});
  auto dated = valid(with("created_at = \"2026-07-08T00:00:00Z\"", "created_at = 2026-07-08"));
  CHECK(dated.provenance.created_at == "2026-07-08");
  auto bare =
      valid(with("authors = [\"Ada <ada@example.com>\"]\ngenerator = \"evolution/0.3\"\n"
                 "source_url = \"https://example.com/greeter\"\n"
                 "created_at = \"2026-07-08T00:00:00Z\"\n",
                 ""));
  CHECK(bare.provenance.authors.empty());
  CHECK(bare.warnings.empty());
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
  auto own = valid(with("activegraph = \">=1.5,<2\"", "forktrial = \">=0.1\""));
  CHECK(own.dependencies.runtime_range == ">=0.1");
  CHECK(own.dependencies.runtime_range_key == "forktrial");
  auto both =
      valid(with("activegraph = \">=1.5,<2\"", "forktrial = \">=0.1\"\nactivegraph = \">=1.5\""));
  CHECK(both.dependencies.runtime_range_key == "forktrial");
  CHECK(problems(with("\">=1.5,<2\"", "\"latest\"")) ==
        Lines{range_problem("dependencies.activegraph", "latest")});
  CHECK(problems(with("\">=1.5,<2\"", "\"*\"")) ==
        Lines{range_problem("dependencies.activegraph", "*")});
  CHECK(problems(with("\">=1.5,<2\"", "3")) ==
        Lines{"dependencies.activegraph: must be a version range string like \">=1.0,<2\", got "
              "an integer"});
}

TEST_CASE("manifest: dependencies.python is a version range", "[pack][manifest]") {
  CHECK(problems(with("python = \">=3.11\"", "python = \"3.11\"")) ==
        Lines{range_problem("dependencies.python", "3.11")});
  CHECK(valid(with("python = \">=3.11\"\n", "")).dependencies.python_range.empty());
}

TEST_CASE("manifest: dependencies.python-deps is a list of strings", "[pack][manifest]") {
  CHECK(problems(with("python-deps = [\"requests>=2\"]", "python-deps = \"requests\"")) ==
        Lines{"dependencies.python-deps: must be an array of strings, got a string"});
  CHECK(problems(with("python-deps = [\"requests>=2\"]", "python-deps = [\"a\", 2]")) ==
        Lines{"dependencies.python-deps[1]: must be a string, got an integer"});
  CHECK(valid(with("python-deps = [\"requests>=2\"]", "python-deps = []"))
            .dependencies.python_deps.empty());
}

TEST_CASE("manifest: [dependencies.packs] maps pack names to version ranges", "[pack][manifest]") {
  CHECK(problems(with("core = \">=0.1\"", "core = \"0.1\"")) ==
        Lines{range_problem("dependencies.packs.core", "0.1")});
  CHECK(problems(with("core = \">=0.1\"", "core = 1")) ==
        Lines{"dependencies.packs.core: must be a version range string like \">=1.0,<2\", got "
              "an integer"});
  CHECK(problems(with("[dependencies.packs]\ncore = \">=0.1\"", "packs = [\"core\"]")) ==
        Lines{"dependencies.packs: must be a table, got an array"});
}

TEST_CASE("manifest: [dependencies.optional-packs] maps pack names to version ranges",
          "[pack][manifest]") {
  CHECK(problems(with("chat = \">=0.1,<1\"", "chat = \"any\"")) ==
        Lines{range_problem("dependencies.optional-packs.chat", "any")});
  std::string as_string = with("[dependencies.optional-packs]\nchat = \">=0.1,<1\"\n", "");
  as_string.replace(as_string.find("python-deps"), 0, "optional-packs = \"chat\"\n");
  CHECK(problems(as_string) == Lines{"dependencies.optional-packs: must be a table, got a string"});
}

TEST_CASE("manifest: other keys under [dependencies] are warnings that say where packs go",
          "[pack][manifest]") {
  auto m = valid(with("python = \">=3.11\"", "python = \">=3.11\"\ncore = \">=0.1\""));
  REQUIRE(m.warnings.size() == 1);
  CHECK(m.warnings[0].text() ==
        "dependencies.core: unknown key; forktrial ignores it (a dependency on another pack goes "
        "under [dependencies.packs])");
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

TEST_CASE("manifest: a capability names its provider and capability", "[pack][manifest]") {
  CHECK(problems(with("provider = \"greeter\", ", "")) ==
        Lines{"surface.capabilities[0].provider: missing; add provider = \"...\""});
  CHECK(problems(with("capability = \"write_greeting\"", "capability = \"write greeting\"")) ==
        Lines{"surface.capabilities[0].capability: must be a non-empty name without whitespace, "
              "got \"write greeting\""});
  CHECK(problems(with("capabilities = [{", "capabilities = [\"x\", {")) ==
        Lines{"surface.capabilities[0]: must be a table with provider, capability and "
              "risk_class, got a string"});
  CHECK(problems(with("capabilities = [", "capabilities = 3 #")) ==
        Lines{"surface.capabilities: must be an array of tables ([[surface.capabilities]] with "
              "provider, capability and risk_class), got an integer"});
}

TEST_CASE("manifest: a capability is declared once per provider and capability",
          "[pack][manifest]") {
  const std::string cap =
      "{ provider = \"greeter\", capability = \"write_greeting\", risk_class = \"low\" }";
  CHECK(problems(with("capabilities = [", "capabilities = [" + cap + ", ")) ==
        Lines{"surface.capabilities[1]: \"greeter.write_greeting\" is declared twice; declare "
              "each provider and capability once"});
  const std::string other =
      "{ provider = \"other\", capability = \"write_greeting\", risk_class = \"low\" }";
  CHECK(valid(with("capabilities = [", "capabilities = [" + other + ", "))
            .surface.capabilities.size() == 2);
}

TEST_CASE("manifest: risk_class is low, medium, high or critical", "[pack][manifest]") {
  CHECK(problems(with("risk_class = \"low\"", "risk_class = \"extreme\"")) ==
        Lines{"surface.capabilities[0].risk_class: must be one of \"low\", \"medium\", \"high\", "
              "\"critical\", got \"extreme\""});
  CHECK(problems(with("risk_class = \"low\", ", "")) ==
        Lines{"surface.capabilities[0].risk_class: missing; add risk_class = \"...\""});
  CHECK(valid(with("risk_class = \"low\"", "risk_class = \"critical\""))
            .surface.capabilities[0]
            .risk_class == "critical");
}

TEST_CASE("manifest: action_class is R0 to R4, empty or absent", "[pack][manifest]") {
  CHECK(problems(with("action_class = \"R1\"", "action_class = \"write\"")) ==
        Lines{action_class_problem("write")});
  CHECK(problems(with("action_class = \"R1\"", "action_class = \"R5\"")) ==
        Lines{action_class_problem("R5")});
  CHECK(valid(with("action_class = \"R1\"", "action_class = \"R4\""))
            .surface.capabilities[0]
            .action_class == "R4");
  CHECK(valid(with("action_class = \"R1\"", "action_class = \"\""))
            .surface.capabilities[0]
            .action_class.empty());
  CHECK(valid(with(", action_class = \"R1\"", "")).surface.capabilities[0].action_class.empty());
}

TEST_CASE("manifest: credential_ref is an optional string", "[pack][manifest]") {
  CHECK(valid(with("action_class = \"R1\"", "action_class = \"R1\", credential_ref = \"gh\""))
            .surface.capabilities[0]
            .credential_ref == "gh");
  CHECK(problems(with("action_class = \"R1\"", "action_class = \"R1\", credential_ref = 1")) ==
        Lines{"surface.capabilities[0].credential_ref: must be a string, got an integer"});
}

TEST_CASE("manifest: forktrial's retired capability shape is refused with the new one",
          "[pack][manifest]") {
  CHECK(problems(with("{ provider = \"greeter\", capability = \"write_greeting\", risk_class = "
                      "\"low\", action_class = \"R1\" }",
                      "{ name = \"write_greeting\", risk = \"low\", action_class = \"write\" }")) ==
        Lines{"surface.capabilities[0]: uses the retired shape { name, risk, action_class = "
              "read|write|external }; write provider = \"...\", capability = \"...\", risk_class "
              "= \"low\" and, optionally, action_class = \"R0\" to \"R4\" and credential_ref = "
              "\"...\""});
}

TEST_CASE("manifest: unknown capability keys are warnings", "[pack][manifest]") {
  auto m = valid(with("action_class = \"R1\"", "action_class = \"R1\", scope = \"all\""));
  REQUIRE(m.warnings.size() == 1);
  CHECK(m.warnings[0].text() ==
        "surface.capabilities[0].scope: unknown key; forktrial ignores it (check the spelling)");
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
  CHECK(result.error().message.starts_with("pack/manifest.toml: 3 problems:\n  pack.name: "));
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

TEST_CASE("real activegraph manifests validate without a problem or a warning",
          "[pack][manifest][activegraph]") {
  for (const char* name :
       {"chat", "core", "gmail", "evolution", "tool_gateway", "chatgpt_export"}) {
    INFO(name);
    auto m = load_manifest(kRealManifests / name, RuntimeRequirement::optional);
    if (!m) FAIL(m.error().message);
    CHECK(m->name == name);
    CHECK(m->warnings.empty());
    CHECK(m->dependencies.runtime_range_key == "activegraph");
    CHECK(m->dependencies.python_range == ">=3.11");
    CHECK(m->fixtures->entrypoint == "fixtures/run_fixtures.py");
    CHECK_FALSE(m->runtime);
  }
}

TEST_CASE("real activegraph manifests: every field is read", "[pack][manifest][activegraph]") {
  auto gmail = load_manifest(kRealManifests / "gmail", RuntimeRequirement::optional);
  REQUIRE(gmail);
  CHECK(gmail->version == "0.6.0");
  CHECK(gmail->content_hash->str() ==
        "sha256:767d0d3cae59237cf9eaecf8025aab52c2b2e66eb3dadffce9f64e90a1074cda");
  CHECK(gmail->provenance.authors == Lines{"Yohei Nakajima"});
  CHECK(gmail->provenance.source_url == "https://github.com/yoheinakajima/activegraph-packs");
  CHECK(gmail->dependencies.runtime_range == ">=1.9,<2.0");
  CHECK(gmail->dependencies.packs.size() == 6);
  CHECK(gmail->dependencies.packs.at("connector_control") == ">=0.1");
  REQUIRE(gmail->surface.capabilities.size() == 7);
  CHECK(gmail->surface.capabilities[1] == Capability{"gmail", "drafts.send", "high", "", "R3"});
  CHECK(gmail->surface.settings_schema == "GmailSettings");

  auto evolution = load_manifest(kRealManifests / "evolution", RuntimeRequirement::optional);
  REQUIRE(evolution);
  CHECK(evolution->dependencies.optional_packs ==
        std::map<std::string, std::string>{{"chat", ">=0.1"}, {"schedule", ">=0.1"}});
  REQUIRE(evolution->surface.capabilities.size() == 2);
  CHECK(evolution->surface.capabilities[0] ==
        Capability{"evolution", "adopt_proposal", "critical", "", ""});

  auto core = load_manifest(kRealManifests / "core", RuntimeRequirement::optional);
  REQUIRE(core);
  CHECK(core->dependencies.runtime_range == ">=1.7.1,<2.0");
  CHECK(core->dependencies.packs.empty());
  CHECK(core->description.find("deterministic \xe2\x80\x94 no LLM") != std::string::npos);
}

TEST_CASE("real activegraph template: only its placeholder hash is refused, as in activegraph",
          "[pack][manifest][activegraph]") {
  auto m = load_manifest(kRealManifests / "_template", RuntimeRequirement::optional);
  REQUIRE_FALSE(m);
  REQUIRE(m.error().issues.size() == 1);
  CHECK(m.error().issues[0].field == "pack.integrity.content_hash");
  CHECK(m.error().issues[0].message.starts_with("malformed hash \"sha256:REGENERATE-ME\""));
  CHECK(m.error().partial.name == "your_pack");
  CHECK_FALSE(m.error().partial.content_hash);
}

TEST_CASE("manifest: a manifest with problems still yields the fields that validated",
          "[pack][manifest]") {
  auto result =
      parse_manifest(with("\"greeter\"", "\"Bad Name\""), "m", RuntimeRequirement::optional);
  REQUIRE_FALSE(result);
  const Manifest& partial = result.error().partial;
  CHECK(partial.name.empty());
  REQUIRE(partial.content_hash);
  CHECK(partial.content_hash->str() == kHash);
  CHECK(partial.runtime->entry == "pack.lua");
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
