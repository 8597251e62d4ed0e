#include "pack/manifest.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace forktrial::pack {
namespace {


std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}

// "1.2.3", optionally "-pre.release" and "+build" (semantic versioning 2.0.0):
// numeric parts without leading zeros.
bool is_semver(std::string_view text) {
  std::string_view core = text.substr(0, text.find_first_of("-+"));
  std::string_view rest = text.substr(core.size());
  int parts = 0;
  std::size_t start = 0;
  while (start <= core.size()) {
    std::size_t end = core.find('.', start);
    if (end == std::string_view::npos) end = core.size();
    std::string_view part = core.substr(start, end - start);
    if (part.empty() || !std::all_of(part.begin(), part.end(), is_digit)) return false;
    if (part.size() > 1 && part[0] == '0') return false;
    ++parts;
    start = end + 1;
  }
  if (parts != 3) return false;
  if (rest.empty()) return true;
  auto identifier_chars = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return is_digit(c) || is_lower(c) || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
    });
  };
  std::size_t plus = rest.find('+');
  if (rest[0] == '-') {
    if (!identifier_chars(rest.substr(1, plus == std::string_view::npos ? plus : plus - 1)))
      return false;
  }
  if (plus != std::string_view::npos && !identifier_chars(rest.substr(plus + 1))) return false;
  return true;
}

// A version inside a range: "1", "1.2", "1.2.3", optionally with a pre-release.
bool is_range_version(std::string_view text) {
  std::string_view core = text.substr(0, text.find('-'));
  if (core.empty()) return false;
  int parts = 0;
  std::size_t start = 0;
  while (start <= core.size()) {
    std::size_t end = core.find('.', start);
    if (end == std::string_view::npos) end = core.size();
    std::string_view part = core.substr(start, end - start);
    if (part.empty() || !std::all_of(part.begin(), part.end(), is_digit)) return false;
    ++parts;
    start = end + 1;
  }
  return parts <= 3;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// ">=1.5,<2", "==0.3.1", "*": comma-separated clauses, each an optional
// operator (>=, <=, >, <, ==, !=, ~=) and a version.
bool is_version_range(std::string_view text) {
  if (trim(text) == "*") return true;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view clause = trim(text.substr(start, end - start));
    for (std::string_view op : {">=", "<=", "==", "!=", "~=", ">", "<"}) {
      if (clause.starts_with(op)) {
        clause = trim(clause.substr(op.size()));
        break;
      }
    }
    if (!is_range_version(clause)) return false;
    start = end + 1;
  }
  return true;
}

bool is_pack_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && is_lower(name[0]) &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return is_lower(c) || is_digit(c) || c == '_'; });
}

bool is_surface_name(std::string_view name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
  });
}

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// Collects issues while walking the document. Each accessor returns the value
// when present and well-typed, records an issue otherwise.
class Checker {
 public:
  std::vector<ManifestIssue> issues;
  std::vector<ManifestIssue> warnings;

  void error(std::string field, std::string message) {
    issues.push_back({std::move(field), std::move(message)});
  }

  const toml::table* table(const toml::table& parent, std::string_view key,
                           const std::string& field, bool required) {
    const toml::node* node = parent.get(key);
    if (node == nullptr) {
      if (required) error(field, "missing table; add a [" + field + "] table");
      return nullptr;
    }
    if (!node->is_table()) {
      error(field, "must be a table, got " + type_name(*node));
      return nullptr;
    }
    return node->as_table();
  }

  std::optional<std::string> string(const toml::table& parent, std::string_view key,
                                    const std::string& field, bool required) {
    const toml::node* node = parent.get(key);
    if (node == nullptr) {
      if (required) error(field, "missing; add " + std::string(key) + " = \"...\"");
      return std::nullopt;
    }
    if (!node->is_string()) {
      error(field, "must be a string, got " + type_name(*node));
      return std::nullopt;
    }
    return node->as_string()->get();
  }

  std::optional<std::string> non_empty_string(const toml::table& parent, std::string_view key,
                                              const std::string& field) {
    auto value = string(parent, key, field, true);
    if (value && trim(*value).empty()) {
      error(field, "must not be empty");
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::string> one_of(const toml::table& parent, std::string_view key,
                                    const std::string& field,
                                    std::initializer_list<std::string_view> allowed,
                                    bool required) {
    auto value = string(parent, key, field, required);
    if (!value) return std::nullopt;
    if (std::find(allowed.begin(), allowed.end(), *value) == allowed.end()) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + in_quotes(a);
      error(field, "must be one of " + list + ", got " + in_quotes(*value));
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::string> confined_path(const toml::table& parent, std::string_view key,
                                           const std::string& field, bool required) {
    auto value = string(parent, key, field, required);
    if (value && !is_confined_relative_path(*value)) {
      error(field,
            "must be a relative path inside the pack (no leading '/', no '..' or '.' "
            "components, '/' as separator), got " +
                in_quotes(*value));
      return std::nullopt;
    }
    return value;
  }

  // An array of distinct, non-empty names without whitespace; missing = empty.
  std::vector<std::string> name_list(const toml::table& parent, std::string_view key,
                                     const std::string& field) {
    std::vector<std::string> out;
    const toml::node* node = parent.get(key);
    if (node == nullptr) return out;
    const toml::array* array = node->as_array();
    if (array == nullptr) {
      error(field, "must be an array of strings, got " + type_name(*node));
      return out;
    }
    std::set<std::string> seen;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& item = *array->get(i);
      std::string item_field = field + "[" + std::to_string(i) + "]";
      if (!item.is_string()) {
        error(item_field, "must be a string, got " + type_name(item));
        continue;
      }
      std::string value = item.as_string()->get();
      if (!is_surface_name(value)) {
        error(item_field, "must be a non-empty name without whitespace, got " + in_quotes(value));
      } else if (!seen.insert(value).second) {
        error(item_field, in_quotes(value) + " is listed twice; list each name once");
      } else {
        out.push_back(std::move(value));
      }
    }
    return out;
  }

  void unknown_keys(const toml::table& table, const std::string& prefix,
                    std::initializer_list<std::string_view> known) {
    for (const auto& [key, node] : table) {
      if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
      std::string field =
          prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      warnings.push_back({field, "unknown key; forktrial ignores it (check the spelling)"});
    }
  }
};

void check_pack_table(Checker& c, const toml::table& doc, Manifest& m) {
  const toml::table* pack = c.table(doc, "pack", "pack", true);
  if (pack == nullptr) return;
  c.unknown_keys(*pack, "pack",
                 {"name", "version", "description", "license", "provenance", "integrity"});
  if (auto name = c.string(*pack, "name", "pack.name", true)) {
    if (is_pack_name(*name)) {
      m.name = *name;
    } else {
      c.error("pack.name",
              "must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, at most "
              "64 characters), got " +
                  in_quotes(*name));
    }
  }
  if (auto version = c.string(*pack, "version", "pack.version", true)) {
    if (is_semver(*version)) {
      m.version = *version;
    } else {
      c.error("pack.version",
              "must be a semantic version like \"1.2.3\", got " + in_quotes(*version));
    }
  }
  if (auto description = c.non_empty_string(*pack, "description", "pack.description")) {
    m.description = *description;
  }
  if (auto license = c.non_empty_string(*pack, "license", "pack.license")) m.license = *license;

  if (const toml::table* provenance = c.table(*pack, "provenance", "pack.provenance", true)) {
    c.unknown_keys(*provenance, "pack.provenance", {"authored_by"});
    if (auto who = c.one_of(*provenance, "authored_by", "pack.provenance.authored_by",
                            {"human", "agent"}, true)) {
      m.authored_by = *who;
    }
  }
  if (const toml::table* integrity = c.table(*pack, "integrity", "pack.integrity", true)) {
    c.unknown_keys(*integrity, "pack.integrity", {"content_hash", "signature"});
    if (auto hash = c.string(*integrity, "content_hash", "pack.integrity.content_hash", true)) {
      if (auto problem = Digest::describe_pin_problem(*hash)) {
        c.error("pack.integrity.content_hash",
                "malformed hash " + in_quotes(*hash) + ": " + *problem +
                    "; it is \"sha256:\" followed by the 64 lowercase hex digits of the pack's "
                    "content hash");
      } else {
        m.content_hash = *Digest::parse(*hash);
      }
    }
    if (auto signature = c.string(*integrity, "signature", "pack.integrity.signature", false)) {
      if (!signature->empty()) {
        c.error("pack.integrity.signature",
                "is reserved and must be empty: signed packs are not supported, and a "
                "signature is rejected rather than accepted unchecked; remove it or set it "
                "to \"\"");
      }
    }
  }
}

void check_dependencies(Checker& c, const toml::table& doc, Manifest& m) {
  const toml::table* deps = c.table(doc, "dependencies", "dependencies", true);
  if (deps == nullptr) return;
  for (const auto& [key, node] : *deps) {
    std::string name(key.str());
    std::string field = "dependencies." + name;
    if (!node.is_string()) {
      c.error(field, "must be a version range string like \">=1.0,<2\", got " + type_name(node));
      continue;
    }
    std::string range = node.as_string()->get();
    if (!is_version_range(range)) {
      c.error(field, "is not a version range: " + in_quotes(range) +
                         "; write comma-separated clauses like \">=1.0,<2\" or \"*\"");
      continue;
    }
    if (name == "forktrial" || name == "activegraph") {
      // forktrial's own key wins when both are given.
      if (m.runtime_range.empty() || name == "forktrial") {
        m.runtime_range = range;
        m.runtime_range_key = name;
      }
    } else {
      m.dependencies[name] = range;
    }
  }
  if (m.runtime_range.empty() && !deps->contains("forktrial") && !deps->contains("activegraph")) {
    c.error("dependencies",
            "missing the runtime version range; add forktrial = \">=0.1\" (or activegraph = "
            "\"...\") under [dependencies]");
  }
}

void check_surface(Checker& c, const toml::table& doc, Manifest& m) {
  const toml::table* surface = c.table(doc, "surface", "surface", true);
  if (surface == nullptr) return;
  c.unknown_keys(*surface, "surface",
                 {"object_types", "relation_types", "behaviors", "tools", "settings_schema",
                  "capabilities", "consumes"});
  m.surface.object_types = c.name_list(*surface, "object_types", "surface.object_types");
  m.surface.relation_types = c.name_list(*surface, "relation_types", "surface.relation_types");
  m.surface.behaviors = c.name_list(*surface, "behaviors", "surface.behaviors");
  m.surface.tools = c.name_list(*surface, "tools", "surface.tools");
  m.surface.consumes = c.name_list(*surface, "consumes", "surface.consumes");
  if (auto schema = c.string(*surface, "settings_schema", "surface.settings_schema", false)) {
    m.surface.settings_schema = *schema;
  }
  const toml::node* caps = surface->get("capabilities");
  if (caps == nullptr) return;
  const toml::array* array = caps->as_array();
  if (array == nullptr) {
    c.error("surface.capabilities",
            "must be an array of tables ({ name, risk, action_class }), got " + type_name(*caps));
    return;
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < array->size(); ++i) {
    std::string field = "surface.capabilities[" + std::to_string(i) + "]";
    const toml::node& item = *array->get(i);
    const toml::table* cap = item.as_table();
    if (cap == nullptr) {
      c.error(field,
              "must be a table { name = \"...\", risk = \"low\", action_class = \"read\" }, "
              "got " +
                  type_name(item));
      continue;
    }
    c.unknown_keys(*cap, field, {"name", "risk", "action_class"});
    Capability capability;
    bool ok = true;
    if (auto name = c.string(*cap, "name", field + ".name", true)) {
      if (!is_surface_name(*name)) {
        c.error(field + ".name",
                "must be a non-empty name without whitespace, got " + in_quotes(*name));
        ok = false;
      } else if (!seen.insert(*name).second) {
        c.error(field + ".name",
                in_quotes(*name) + " is declared twice; declare each capability once");
        ok = false;
      }
      capability.name = *name;
    } else {
      ok = false;
    }
    auto risk = c.one_of(*cap, "risk", field + ".risk", {"low", "medium", "high"}, true);
    auto action = c.one_of(*cap, "action_class", field + ".action_class",
                           {"read", "write", "external"}, true);
    if (ok && risk && action) {
      capability.risk = *risk;
      capability.action_class = *action;
      m.surface.capabilities.push_back(std::move(capability));
    }
  }
}

void check_fixtures(Checker& c, const toml::table& doc, Manifest& m) {
  const toml::table* fixtures = c.table(doc, "fixtures", "fixtures", false);
  if (fixtures == nullptr) return;
  c.unknown_keys(*fixtures, "fixtures", {"entrypoint", "deterministic"});
  Fixtures f;
  auto entry = c.confined_path(*fixtures, "entrypoint", "fixtures.entrypoint", true);
  if (const toml::node* det = fixtures->get("deterministic")) {
    if (det->is_boolean()) {
      f.deterministic = det->as_boolean()->get();
    } else {
      c.error("fixtures.deterministic", "must be true or false, got " + type_name(*det));
    }
  }
  if (entry) {
    f.entrypoint = *entry;
    m.fixtures = f;
  }
}

void check_runtime(Checker& c, const toml::table& doc, Manifest& m, RuntimeRequirement need) {
  const toml::node* node = doc.get("runtime");
  if (node == nullptr) {
    if (need == RuntimeRequirement::required) {
      c.error("runtime",
              "missing table: a pack to be executed needs [runtime] with language = \"lua\" "
              "and entry = \"pack.lua\"");
    }
    return;
  }
  const toml::table* runtime = c.table(doc, "runtime", "runtime", false);
  if (runtime == nullptr) return;
  c.unknown_keys(*runtime, "runtime", {"language", "entry"});
  auto language = c.one_of(*runtime, "language", "runtime.language", {"lua"}, true);
  auto entry = c.confined_path(*runtime, "entry", "runtime.entry", true);
  if (entry && !entry->ends_with(".lua")) {
    c.error("runtime.entry", "must name a .lua file, got " + in_quotes(*entry));
    entry.reset();
  }
  if (language && entry) m.runtime = RuntimeSection{*language, *entry};
}

}  // namespace

bool is_confined_relative_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\\') != std::string_view::npos ||
      path.find('\0') != std::string_view::npos) {
    return false;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string ManifestErrors::message() const {
  std::string out = source + ": " + std::to_string(issues.size()) +
                    (issues.size() == 1 ? " problem" : " problems") + ":";
  for (const auto& issue : issues) out += "\n  " + issue.text();
  return out;
}

std::expected<Manifest, ManifestErrors> parse_manifest(std::string_view text,
                                                       std::string_view source,
                                                       RuntimeRequirement runtime) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << "line " << e.source().begin.line << ", column " << e.source().begin.column;
    return std::unexpected(ManifestErrors{
        std::string(source),
        {{std::string(kManifestFile),
          "not valid TOML (" + where.str() + "): " + std::string(e.description())}}});
  }
  Checker c;
  Manifest m;
  c.unknown_keys(doc, "", {"pack", "dependencies", "surface", "fixtures", "runtime"});
  check_pack_table(c, doc, m);
  check_dependencies(c, doc, m);
  check_surface(c, doc, m);
  check_fixtures(c, doc, m);
  check_runtime(c, doc, m, runtime);
  if (!c.issues.empty()) {
    return std::unexpected(ManifestErrors{std::string(source), std::move(c.issues)});
  }
  m.warnings = std::move(c.warnings);
  return m;
}

std::expected<Manifest, ManifestErrors> load_manifest(const std::filesystem::path& pack_dir,
                                                      RuntimeRequirement runtime) {
  std::filesystem::path file = pack_dir / kManifestFile;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::error_code ec;
    std::string why = std::filesystem::exists(file, ec)
                          ? "cannot be read; check its permissions"
                          : "is missing; every pack has a manifest.toml at its root";
    return std::unexpected(ManifestErrors{file.string(), {{std::string(kManifestFile), why}}});
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), file.string(), runtime);
}

}  // namespace forktrial::pack
