#include "pack/manifest.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "pack/toml.h"
#include "pack/toml_screen.h"

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

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

// Reads a PEP 440 version (activegraph's grammar) from the front of `rest`.
class VersionCursor {
 public:
  explicit VersionCursor(std::string_view text) : rest_(text) {}
  bool at_end() const { return rest_.empty(); }
  bool literal(std::string_view word) {
    if (!rest_.starts_with(word)) return false;
    rest_.remove_prefix(word.size());
    return true;
  }
  bool digits() {
    return span([](char c) { return is_digit(c); });
  }
  bool alphanumerics() {
    return span([](char c) { return is_digit(c) || is_lower(c); });
  }
  bool next_is_digit_after(std::string_view word) const {
    return rest_.size() > word.size() && rest_.starts_with(word) && is_digit(rest_[word.size()]);
  }

 private:
  template <typename Pred>
  bool span(Pred pred) {
    std::size_t n = 0;
    while (n < rest_.size() && pred(rest_[n])) ++n;
    rest_.remove_prefix(n);
    return n > 0;
  }
  std::string_view rest_;
};

bool is_pack_name(std::string_view name) {
  return name.size() >= 2 && name.size() <= 64 && is_lower(name[0]) &&
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

  // Calls `each(index, value)` for every string of an array, in order, and
  // records every other item as an issue; a missing array has no items.
  template <typename Each>
  void for_each_string(const toml::table& parent, std::string_view key, const std::string& field,
                       Each each) {
    const toml::node* node = parent.get(key);
    if (node == nullptr) return;
    const toml::array* array = node->as_array();
    if (array == nullptr) {
      error(field, "must be an array of strings, got " + type_name(*node));
      return;
    }
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& item = *array->get(i);
      if (item.is_string()) {
        each(i, item.as_string()->get());
      } else {
        error(field + "[" + std::to_string(i) + "]", "must be a string, got " + type_name(item));
      }
    }
  }

  // An array of strings, each kept as written; missing = empty.
  std::vector<std::string> strings(const toml::table& parent, std::string_view key,
                                   const std::string& field) {
    std::vector<std::string> out;
    for_each_string(parent, key, field,
                    [&](std::size_t, const std::string& value) { out.push_back(value); });
    return out;
  }

  // An array of distinct, non-empty names without whitespace; missing = empty.
  std::vector<std::string> name_list(const toml::table& parent, std::string_view key,
                                     const std::string& field) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for_each_string(parent, key, field, [&](std::size_t index, const std::string& value) {
      const std::string item_field = field + "[" + std::to_string(index) + "]";
      if (!is_surface_name(value)) {
        error(item_field, "must be a non-empty name without whitespace, got " + in_quotes(value));
      } else if (!seen.insert(value).second) {
        error(item_field, in_quotes(value) + " is listed twice; list each name once");
      } else {
        out.push_back(value);
      }
    });
    return out;
  }

  // A PEP 440 specifier set such as ">=1.4,<2.0".
  std::optional<std::string> specifier_set(const toml::node& node, const std::string& field) {
    if (!node.is_string()) {
      error(field, "must be a version range string like \">=1.0,<2\", got " + type_name(node));
      return std::nullopt;
    }
    std::string range = node.as_string()->get();
    if (!is_pep440_specifier_set(range)) {
      error(field, "is not a PEP 440 version range: " + in_quotes(range) +
                       "; write comma-separated clauses, each an operator (>=, <=, >, <, ==, "
                       "!=, ~=, ===) and a version, like \">=1.0,<2\"");
      return std::nullopt;
    }
    return range;
  }

  void unknown_keys(const toml::table& table, const std::string& prefix,
                    std::initializer_list<std::string_view> known,
                    std::string_view hint = "check the spelling") {
    for (const auto& [key, node] : table) {
      if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
      std::string field =
          prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      warnings.push_back({field, "unknown key; forktrial ignores it (" + std::string(hint) + ")"});
    }
  }
};

void check_provenance(Checker& c, const toml::table& pack, Manifest& m) {
  const toml::table* provenance = c.table(pack, "provenance", "pack.provenance", true);
  if (provenance == nullptr) return;
  c.unknown_keys(*provenance, "pack.provenance",
                 {"authored_by", "authors", "generator", "source_url", "created_at"});
  Provenance& p = m.provenance;
  if (auto who = c.one_of(*provenance, "authored_by", "pack.provenance.authored_by",
                          {"human", "agent"}, true)) {
    p.authored_by = *who;
  }
  p.authors = c.strings(*provenance, "authors", "pack.provenance.authors");
  p.generator = c.string(*provenance, "generator", "pack.provenance.generator", false).value_or("");
  p.source_url =
      c.string(*provenance, "source_url", "pack.provenance.source_url", false).value_or("");
  // activegraph writes created_at as a string; a TOML date-time means the same.
  if (const toml::node* created = provenance->get("created_at")) {
    if (created->is_string()) {
      p.created_at = created->as_string()->get();
    } else if (created->is_date() || created->is_time() || created->is_date_time()) {
      std::ostringstream text;
      created->visit([&](const auto& value) { text << value; });
      p.created_at = text.str();
    } else {
      c.error("pack.provenance.created_at",
              "must be a string or a date-time like \"2026-07-08T00:00:00Z\", got " +
                  type_name(*created));
    }
  }
}

void check_integrity(Checker& c, const toml::table& pack, Manifest& m) {
  const toml::table* integrity = c.table(pack, "integrity", "pack.integrity", true);
  if (integrity == nullptr) return;
  c.unknown_keys(*integrity, "pack.integrity", {"content_hash", "signature"});
  if (auto hash = c.string(*integrity, "content_hash", "pack.integrity.content_hash", true)) {
    if (auto problem = Digest::describe_pin_problem(*hash)) {
      c.error("pack.integrity.content_hash",
              "malformed hash " + in_quotes(*hash) + ": " + *problem +
                  "; it is \"sha256:\" followed by the 64 lowercase hex digits of the pack's "
                  "content hash");
    } else {
      m.content_hash = Digest::parse(*hash);
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
              "must be a lowercase identifier (a-z, 0-9, '_', starting with a letter, 2 to 64 "
              "characters), got " +
                  in_quotes(*name));
    }
  }
  if (auto version = c.string(*pack, "version", "pack.version", true)) {
    if (is_pep440_version(*version)) {
      m.version = *version;
    } else {
      c.error("pack.version", "must be a PEP 440 version like \"1.2.3\" or \"1.0.0rc1\", got " +
                                  in_quotes(*version));
    }
  }
  if (auto description = c.non_empty_string(*pack, "description", "pack.description")) {
    m.description = *description;
  }
  // activegraph allows an empty or missing license (publishing policy, not
  // validity, decides whether a pack needs one).
  m.license = c.string(*pack, "license", "pack.license", false).value_or("");
  check_provenance(c, *pack, m);
  check_integrity(c, *pack, m);
}

// A table of pack name -> version range ([dependencies.packs] and
// [dependencies.optional-packs]); missing = empty.
std::map<std::string, std::string> pack_ranges(Checker& c, const toml::table& deps,
                                               std::string_view key) {
  std::map<std::string, std::string> out;
  const std::string field = "dependencies." + std::string(key);
  const toml::table* table = c.table(deps, key, field, false);
  if (table == nullptr) return out;
  for (const auto& [name, node] : *table) {
    if (auto range = c.specifier_set(node, field + "." + std::string(name.str()))) {
      out[std::string(name.str())] = *range;
    }
  }
  return out;
}

void check_dependencies(Checker& c, const toml::table& doc, Manifest& m) {
  const toml::table* deps = c.table(doc, "dependencies", "dependencies", true);
  if (deps == nullptr) return;
  c.unknown_keys(*deps, "dependencies",
                 {"forktrial", "activegraph", "python", "python-deps", "packs", "optional-packs"},
                 "a dependency on another pack goes under [dependencies.packs]");
  Dependencies& d = m.dependencies;
  // forktrial's own key wins when both are given.
  for (std::string_view key : {"activegraph", "forktrial"}) {
    const toml::node* node = deps->get(key);
    if (node == nullptr) continue;
    if (auto range = c.specifier_set(*node, "dependencies." + std::string(key))) {
      d.runtime_range = *range;
      d.runtime_range_key = key;
    }
  }
  if (!deps->contains("forktrial") && !deps->contains("activegraph")) {
    c.error("dependencies",
            "missing the runtime version range; add forktrial = \">=0.1\" (or activegraph = "
            "\"...\") under [dependencies]");
  }
  if (const toml::node* python = deps->get("python")) {
    d.python_range = c.specifier_set(*python, "dependencies.python").value_or("");
  }
  d.python_deps = c.strings(*deps, "python-deps", "dependencies.python-deps");
  d.packs = pack_ranges(c, *deps, "packs");
  d.optional_packs = pack_ranges(c, *deps, "optional-packs");
}

// forktrial's first capability shape, { name, risk, action_class =
// read|write|external }, replaced by activegraph's.
bool is_retired_capability_shape(const toml::table& cap) {
  return (cap.contains("name") || cap.contains("risk")) && !cap.contains("provider") &&
         !cap.contains("capability") && !cap.contains("risk_class");
}

std::optional<Capability> check_capability(Checker& c, const toml::table& cap,
                                           const std::string& field) {
  if (is_retired_capability_shape(cap)) {
    c.error(field,
            "uses the retired shape { name, risk, action_class = read|write|external }; "
            "write provider = \"...\", capability = \"...\", risk_class = \"low\" and, "
            "optionally, action_class = \"R0\" to \"R4\" and credential_ref = \"...\"");
    return std::nullopt;
  }
  c.unknown_keys(cap, field,
                 {"provider", "capability", "risk_class", "credential_ref", "action_class"});
  bool ok = true;
  auto name_field = [&](std::string_view key) {
    const std::string where = field + "." + std::string(key);
    auto value = c.string(cap, key, where, true);
    if (value && !is_surface_name(*value)) {
      c.error(where, "must be a non-empty name without whitespace, got " + in_quotes(*value));
      value.reset();
    }
    ok = ok && value.has_value();
    return value.value_or("");
  };
  Capability capability;
  capability.provider = name_field("provider");
  capability.capability = name_field("capability");
  auto risk = c.one_of(cap, "risk_class", field + ".risk_class",
                       {"low", "medium", "high", "critical"}, true);
  ok = ok && risk.has_value();
  capability.risk_class = risk.value_or("");
  if (auto ref = c.string(cap, "credential_ref", field + ".credential_ref", false)) {
    capability.credential_ref = *ref;
  } else {
    ok = ok && !cap.contains("credential_ref");
  }
  // "" and absent both mean undeclared (the capability then needs approval).
  if (const toml::node* action = cap.get("action_class")) {
    auto value = action->is_string() && action->as_string()->get().empty()
                     ? std::optional<std::string>("")
                     : c.one_of(cap, "action_class", field + ".action_class",
                                {"R0", "R1", "R2", "R3", "R4"}, false);
    ok = ok && value.has_value();
    capability.action_class = value.value_or("");
  }
  if (!ok) return std::nullopt;
  return capability;
}

void check_capabilities(Checker& c, const toml::table& surface, Manifest& m) {
  const toml::node* caps = surface.get("capabilities");
  if (caps == nullptr) return;
  const toml::array* array = caps->as_array();
  if (array == nullptr) {
    c.error("surface.capabilities",
            "must be an array of tables ([[surface.capabilities]] with provider, capability and "
            "risk_class), got " +
                type_name(*caps));
    return;
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < array->size(); ++i) {
    std::string field = "surface.capabilities[" + std::to_string(i) + "]";
    const toml::node& item = *array->get(i);
    const toml::table* cap = item.as_table();
    if (cap == nullptr) {
      c.error(field,
              "must be a table with provider, capability and risk_class, got " + type_name(item));
      continue;
    }
    auto capability = check_capability(c, *cap, field);
    if (!capability) continue;
    if (!seen.insert(capability->id()).second) {
      c.error(field, in_quotes(capability->id()) +
                         " is declared twice; declare each provider and capability once");
      continue;
    }
    m.surface.capabilities.push_back(std::move(*capability));
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
  if (auto schema = c.string(*surface, "settings_schema", "surface.settings_schema", false)) {
    m.surface.settings_schema = *schema;
  }
  check_capabilities(c, *surface, m);
  m.surface.consumes = c.name_list(*surface, "consumes", "surface.consumes");
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
      f.deterministic_declared = true;
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

// v? N(.N)* [(a|b|rc)N] [.postN] [.devN] [+label(.label)*]
bool is_pep440_version(std::string_view text) {
  VersionCursor v(text);
  v.literal("v");
  if (!v.digits()) return false;
  while (v.next_is_digit_after(".")) {
    v.literal(".");
    v.digits();
  }
  if (v.literal("a") || v.literal("b") || v.literal("rc")) {
    if (!v.digits()) return false;
  }
  if (v.literal(".post") && !v.digits()) return false;
  if (v.literal(".dev") && !v.digits()) return false;
  if (v.literal("+")) {
    do {
      if (!v.alphanumerics()) return false;
    } while (v.literal("."));
  }
  return v.at_end();
}

bool is_pep440_specifier_set(std::string_view text) {
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    std::string_view clause = trim(text.substr(start, comma - start));
    // "===" before "==", and two-character operators before one-character ones.
    bool has_operator = false;
    for (std::string_view op : {"===", "~=", "==", "!=", "<=", ">=", "<", ">"}) {
      if (clause.starts_with(op)) {
        clause = trim(clause.substr(op.size()));
        has_operator = true;
        break;
      }
    }
    const bool token = !clause.empty() && std::all_of(clause.begin(), clause.end(), [](char c) {
      return is_digit(c) || is_lower(c) || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
             c == '*' || c == '+' || c == '!' || c == '-';
    });
    if (!has_operator || !token) return false;
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}

ManifestErrors::ManifestErrors(std::string validated, std::vector<ManifestIssue> found,
                               Manifest valid)
    : Status{ErrorCode::invalid_argument, ""},
      source(std::move(validated)),
      issues(std::move(found)),
      partial(std::move(valid)) {
  message = source + ": " + std::to_string(issues.size()) +
            (issues.size() == 1 ? " problem" : " problems") + ":";
  for (const auto& issue : issues) message += "\n  " + issue.text();
}

std::expected<Manifest, ManifestErrors> parse_manifest(std::string_view text,
                                                       std::string_view source,
                                                       RuntimeRequirement runtime) {
  if (auto bad = toml_text_problem(text)) {
    return std::unexpected(ManifestErrors{
        std::string(source),
        {{std::string(kManifestFile), "not valid TOML (line " + std::to_string(bad->line) +
                                          ", column " + std::to_string(bad->column) +
                                          "): " + bad->message}},
        {}});
  }
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << "line " << e.source().begin.line << ", column " << e.source().begin.column;
    return std::unexpected(
        ManifestErrors{std::string(source),
                       {{std::string(kManifestFile),
                         "not valid TOML (" + where.str() + "): " + std::string(e.description())}},
                       {}});
  }
  Checker c;
  Manifest m;
  c.unknown_keys(doc, "", {"pack", "dependencies", "surface", "fixtures", "runtime"});
  check_pack_table(c, doc, m);
  check_dependencies(c, doc, m);
  check_surface(c, doc, m);
  check_fixtures(c, doc, m);
  check_runtime(c, doc, m, runtime);
  m.warnings = std::move(c.warnings);
  if (!c.issues.empty()) {
    return std::unexpected(ManifestErrors{std::string(source), std::move(c.issues), std::move(m)});
  }
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
    return std::unexpected(ManifestErrors{file.string(), {{std::string(kManifestFile), why}}, {}});
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), file.string(), runtime);
}

bool declares_deterministic(const Manifest& manifest) {
  return manifest.fixtures && manifest.fixtures->deterministic_declared &&
         manifest.fixtures->deterministic;
}

}  // namespace forktrial::pack
