#include "coordinator/batch_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "base/text.h"
#include "coordinator/orchestration.h"
#include "pack/bundle_hash.h"
#include "pack/manifest.h"
#include "pack/pack_check.h"
#include "pack/pack_files.h"
#include "pack/scenario.h"
#include "pack/toml.h"
#include "pack/toml_screen.h"
#include "sandbox/limit_units.h"
#include "store/event.h"
#include "store/ids.h"

namespace forktrial::coordinator {
namespace {

// What runs the pack read as `files` (pack/executor.h).
pack::Executor executor_of_dir(const pack::PackFiles& files) {
  return pack::is_activegraph_pack(files.root()) ? pack::Executor::activegraph
                                                 : pack::Executor::lua;
}

namespace fs = std::filesystem;
using nlohmann::json;

// How many per-trial problems are listed before the rest are counted: the
// parts of a label are checked before expansion, so these are a backstop.
constexpr std::size_t kMaxTrialProblemsListed = 10;

// Every problem found, each "<key> (line N): <what and what to do>".
class ProblemList {
 public:
  void add(std::string_view key, const toml::node* node, const std::string& text) {
    std::string where(key);
    if (node != nullptr && node->source().begin.line > 0) {
      where += " (line " + std::to_string(node->source().begin.line) + ")";
    }
    list_.push_back(where + ": " + text);
  }
  void add(std::string text) { list_.push_back(std::move(text)); }
  std::size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  std::vector<std::string> take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

std::string type_name(const toml::node& node) {
  std::ostringstream name;
  name << node.type();
  const std::string text = name.str();
  return (std::string_view("aeiou").find(text.front()) == std::string_view::npos ? "a " : "an ") +
         text;
}

std::string item_key(std::string_view key, std::size_t index) {
  return std::string(key) + "[" + std::to_string(index) + "]";
}

std::string join_key(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : std::string(prefix) + "." + std::string(key);
}

void refuse_unknown_keys(const toml::table& table, std::string_view prefix,
                         std::initializer_list<std::string_view> known, ProblemList& problems) {
  for (const auto& [key, node] : table) {
    if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    problems.add(join_key(prefix, escape_controls(key.str())), &node,
                 "unknown key; the keys here are " + list + " (see docs/batch-file.md)");
  }
}

// A string value, or a problem naming `key`.
std::optional<std::string> string_at(const toml::table& table, std::string_view key,
                                     const std::string& full_key, ProblemList& problems) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_string()) {
    problems.add(full_key, node, "must be a string, got " + type_name(*node));
    return std::nullopt;
  }
  return node->as_string()->get();
}

// ---- Pack directories ------------------------------------------------------

// Every pack directory of the batch, each read (walked and hashed) once.
class PackDirectories {
 public:
  explicit PackDirectories(fs::path base) : base_(std::move(base)) {}

  const fs::path& base() const { return base_; }

  // `written` resolved against the batch file's directory: absolute,
  // lexically normal, without a trailing separator.
  fs::path resolve(std::string_view written) const {
    fs::path path(written);
    if (path.is_relative()) path = base_ / path;
    path = path.lexically_normal();
    if (!path.has_filename() && path != path.root_path()) path = path.parent_path();
    return path;
  }

  // The index of the directory `root`, registered on first use by `key`.
  std::size_t add(const fs::path& root, const std::string& key) {
    auto [it, added] = index_.try_emplace(root.string(), dirs_.size());
    if (added) dirs_.push_back(Directory{root, key, std::nullopt, std::nullopt});
    return it->second;
  }

  // Walks every registered directory that was not read yet.
  void read_all() {
    for (Directory& dir : dirs_) {
      if (!dir.files) dir.files.emplace(pack::PackFiles::read(dir.root));
    }
  }

  const fs::path& root(std::size_t i) const { return dirs_[i].root; }
  const std::string& first_key(std::size_t i) const { return dirs_[i].first_key; }
  // Null when the directory could not be read (see report_unreadable).
  const pack::PackFiles* files(std::size_t i) const {
    const auto& files = *dirs_[i].files;
    return files ? &*files : nullptr;
  }

  // One problem per directory that could not be read, at the key that named
  // it first, with the line of that key when known.
  void report_unreadable(ProblemList& problems,
                         const std::unordered_map<std::string, const toml::node*>& nodes) const {
    for (const Directory& dir : dirs_) {
      if (*dir.files) continue;
      const pack::WalkViolations& walk = dir.files->error();
      const bool missing = walk.violations.size() == 1 &&
                           (walk.violations[0].rule == pack::WalkRule::root_missing ||
                            walk.violations[0].rule == pack::WalkRule::root_not_directory);
      std::string text =
          missing ? "no pack directory at " + escape_controls(dir.root.string()) + " (" +
                        walk.violations[0].detail +
                        "); relative paths resolve against the batch file's directory, " +
                        escape_controls(base_.string())
                  : escape_controls(walk.message);
      const auto node = nodes.find(dir.first_key);
      problems.add(dir.first_key, node == nodes.end() ? nullptr : node->second, text);
    }
  }

  // Why directory `i`, read, is not a pack a trial can run (its manifest,
  // checked as the trial child checks it before running anything), or
  // nullopt when it is one. Checked once per directory. A directory that is
  // not a pack (one without manifest.toml, say) is refused here, before
  // anything of it is archived or leaves this machine.
  const std::optional<std::string>& manifest_problem(std::size_t i) {
    Directory& dir = dirs_[i];
    if (!dir.manifest_problem) {
      std::optional<std::string> problem;
      if (const pack::PackFiles* checked = files(i)) {
        // An activegraph pack has no [runtime]: activegraph's child runs it.
        const pack::PackCheck check =
            pack::check_pack(*checked, executor_of_dir(*checked) == pack::Executor::activegraph
                                           ? pack::RuntimeRequirement::optional
                                           : pack::RuntimeRequirement::required);
        if (!check.ok()) {
          std::string text = escape_controls(dir.root.string()) +
                             " is not a pack a trial can run, so nothing of it is archived "
                             "or uploaded:";
          for (const std::string& line : check.problems) text += "\n  " + escape_controls(line);
          problem = text;
        }
      }
      dir.manifest_problem.emplace(std::move(problem));
    }
    return *dir.manifest_problem;
  }

  // For a pack a specification asks to run without its manifest's checks
  // (manifest_required false): a directory without manifest.toml is still
  // no pack, and is refused as one. nullopt when it has one.
  std::optional<std::string> marker_problem(std::size_t i) const {
    const pack::PackFiles* read = files(i);
    if (read == nullptr || read->contains("manifest.toml")) return std::nullopt;
    return escape_controls(dirs_[i].root.string()) +
           " holds no manifest.toml, so it is not a pack, and nothing of it is archived or "
           "uploaded (manifest_required false skips the manifest's checks, not the manifest)";
  }

  // One problem per read directory that is not a pack, at the key that
  // named it first.
  void report_not_packs(ProblemList& problems,
                        const std::unordered_map<std::string, const toml::node*>& nodes) {
    for (std::size_t i = 0; i < dirs_.size(); ++i) {
      if (const auto& problem = manifest_problem(i)) {
        const auto node = nodes.find(dirs_[i].first_key);
        problems.add(dirs_[i].first_key, node == nodes.end() ? nullptr : node->second, *problem);
      }
    }
  }

  std::vector<BatchPack> packs() const {
    std::vector<BatchPack> out;
    out.reserve(dirs_.size());
    for (const Directory& dir : dirs_) {
      out.push_back(BatchPack{dir.root.string(), (*dir.files)->bundle_hash()});
    }
    return out;
  }

 private:
  struct Directory {
    fs::path root;
    std::string first_key;
    std::optional<std::expected<pack::PackFiles, pack::WalkViolations>> files;
    std::optional<std::optional<std::string>> manifest_problem;  // once checked
  };
  fs::path base_;
  std::vector<Directory> dirs_;
  std::unordered_map<std::string, std::size_t> index_;
};

// A pin, checked against the hash that was read; the problem names the key
// holding the pin, both hashes and what to do.
void check_pin(const std::string& expect, const std::string& key, const toml::node* node,
               const pack::PackFiles& files, ProblemList& problems) {
  auto verified = pack::compare_pin(expect, files.bundle_hash(), files.root());
  if (!verified) {
    problems.add(key, node, verified.error().message);
  }
}

// The store's rule for an id (store/event.h): plain text, not empty, at most
// kMaxIdBytes; nullopt when `id` follows it.
std::optional<std::string> id_problem(std::string_view what, std::string_view id) {
  if (id.empty()) return std::string(what) + " is empty";
  return named_text_problem(what, id, store::kMaxIdBytes);
}

// a * b, or nullopt when it exceeds `limit`.
std::optional<std::uint64_t> bounded_product(std::uint64_t a, std::uint64_t b,
                                             std::uint64_t limit) {
  if (b != 0 && a > limit / b) return std::nullopt;
  return a * b;
}

// ---- TOML: the limits -----------------------------------------------------

// A limit in human units becomes the JSON number parse_trial_limits reads,
// so that every rule on the limits (types, unknown fields, ranges through
// check_trial_limits) is applied by the one parser that owns them.
enum class Unit { none, seconds, whole_seconds, bytes };

struct LimitKey {
  std::string_view key;        // as written in the batch file
  std::string_view canonical;  // TrialLimits' field
  Unit unit;
};

constexpr LimitKey kLimitKeys[] = {
    {"wall_clock", "wall_clock_seconds", Unit::seconds},
    {"wall_clock_seconds", "wall_clock_seconds", Unit::seconds},
    {"max_rss", "max_rss_bytes", Unit::bytes},
    {"max_rss_bytes", "max_rss_bytes", Unit::bytes},
    {"max_events", "max_events", Unit::none},
    {"max_llm_calls", "max_llm_calls", Unit::none},
    {"max_cpu", "max_cpu_seconds", Unit::whole_seconds},
    {"max_cpu_seconds", "max_cpu_seconds", Unit::whole_seconds},
    {"max_appended_events", "max_appended_events", Unit::none},
    {"max_appended_bytes", "max_appended_bytes", Unit::bytes},
    {"env_passthrough", "env_passthrough", Unit::none},
};

// A TOML value as JSON, for parse_trial_limits to judge; a date or time,
// which JSON lacks, becomes a string naming its type (and is refused as one).
json to_json(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* b = node.as_boolean()) return b->get();
  if (const auto* array = node.as_array()) {
    json out = json::array();
    for (const auto& item : *array) out.push_back(to_json(item));
    return out;
  }
  if (const auto* table = node.as_table()) {
    json out = json::object();
    for (const auto& [key, value] : *table) out[std::string(key.str())] = to_json(value);
    return out;
  }
  return type_name(node);
}

// A limit written with a unit, as the number it stands for; nullopt (and a
// problem) when the text is not in the unit.
std::optional<json> with_unit(const toml::node& node, Unit unit, const std::string& key,
                              ProblemList& problems) {
  if (unit == Unit::none || !node.is_string()) return to_json(node);
  const std::string& text = node.as_string()->get();
  const auto number = [&]<typename T>(std::expected<T, Status> parsed) -> std::optional<json> {
    if (parsed) return json(*parsed);
    problems.add(key, &node, parsed.error().message);
    return std::nullopt;
  };
  switch (unit) {
    case Unit::seconds:
      return number(sandbox::parse_duration_seconds(text));
    case Unit::whole_seconds:
      return number(sandbox::parse_whole_seconds(text));
    case Unit::bytes:
      return number(sandbox::parse_byte_size(text));
    case Unit::none:
      break;
  }
  return to_json(node);
}

sandbox::TrialLimits read_limits(const toml::table& doc, ProblemList& problems) {
  const toml::node* node = doc.get("limits");
  if (node == nullptr) return {};
  if (!node->is_table()) {
    problems.add("limits", node, "must be a table, got " + type_name(*node));
    return {};
  }
  json limits = json::object();
  // For each TrialLimits field given: the key it was written as and its
  // node, to name them in problems.
  struct Written {
    std::string key;
    const toml::node* node;
  };
  std::unordered_map<std::string, Written> written;
  for (const auto& [key, value] : *node->as_table()) {
    const std::string full_key = "limits." + escape_controls(key.str());
    const auto* known = std::find_if(std::begin(kLimitKeys), std::end(kLimitKeys),
                                     [&](const LimitKey& k) { return k.key == key.str(); });
    if (known == std::end(kLimitKeys)) {
      std::string list;
      for (const LimitKey& k : kLimitKeys) list += (list.empty() ? "" : ", ") + std::string(k.key);
      problems.add(full_key, &value,
                   "unknown limit; the limits are " + list + " (see docs/batch-file.md)");
      continue;
    }
    const std::string canonical(known->canonical);
    if (auto [it, added] = written.try_emplace(canonical, Written{full_key, &value}); !added) {
      problems.add(full_key, &value,
                   "the same limit as " + it->second.key + "; give it once, under one name");
      continue;
    }
    if (auto number = with_unit(value, known->unit, full_key, problems)) {
      limits[canonical] = std::move(*number);
    }
  }
  auto parsed = sandbox::parse_trial_limits(limits.dump());
  if (parsed) return *parsed;
  for (const std::string& problem : parsed.error().list) {
    // parse_trial_limits names TrialLimits' field ("limits.max_rss_bytes:
    // ..."); name the key that was written, with its line.
    const std::size_t colon = problem.find(": ");
    const std::string field = problem.substr(0, colon);
    const std::string base = field.substr(0, field.find('['));
    const auto it = written.find(base.substr(std::string_view("limits.").size()));
    if (colon == std::string::npos || !base.starts_with("limits.") || it == written.end()) {
      problems.add(problem);
    } else {
      problems.add(it->second.key + field.substr(base.size()), it->second.node,
                   problem.substr(colon + 2));
    }
  }
  return {};
}

// ---- TOML: the matrix ------------------------------------------------------

struct PackUse {
  std::size_t dir = 0;
  std::string key;  // the key naming the directory
  std::optional<std::string> expect;
  std::string expect_key;
  const toml::node* expect_node = nullptr;
};

struct Candidate {
  std::string key;  // "candidates[i]"
  std::string name;
  PackUse pack;
  std::vector<PackUse> extras;
};

struct Scenario {
  std::string key;
  const toml::node* node = nullptr;
  std::string spec;
  std::string path;  // the file part of `spec`
};

// The array of tables `key` ([[key]]); null when it is absent (not
// reported) or not an array (reported).
const toml::array* table_array(const toml::table& doc, std::string_view key,
                               ProblemList& problems) {
  const toml::node* node = doc.get(key);
  if (node == nullptr) return nullptr;
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    problems.add(
        key, node,
        "must be an array of tables ([[" + std::string(key) + "]]), got " + type_name(*node));
  }
  return array;
}

// A pack reference: its directory (`pack`) and optional pin (`expect`).
std::optional<PackUse> read_pack_use(const toml::table& table, const std::string& prefix,
                                     PackDirectories& dirs, ProblemList& problems,
                                     std::unordered_map<std::string, const toml::node*>& nodes) {
  PackUse use;
  use.key = prefix + ".pack";
  const toml::node* pack = table.get("pack");
  std::optional<std::string> dir = string_at(table, "pack", use.key, problems);
  if (pack == nullptr) {
    problems.add(use.key, &table, "missing; add pack = \"<pack directory>\"");
  } else if (dir && dir->empty()) {
    problems.add(use.key, pack, "must not be empty; give the pack's directory");
    dir.reset();
  }
  use.expect_key = prefix + ".expect";
  use.expect_node = table.get("expect");
  if (auto expect = string_at(table, "expect", use.expect_key, problems)) {
    if (auto malformed = pack::check_pin_form(*expect)) {
      problems.add(use.expect_key, use.expect_node, malformed->message);
    } else {
      use.expect = *expect;
    }
  }
  if (!dir) return std::nullopt;
  use.dir = dirs.add(dirs.resolve(*dir), use.key);
  nodes.emplace(use.key, pack);
  return use;
}

std::vector<Candidate> read_candidates(const toml::table& doc, PackDirectories& dirs,
                                       ProblemList& problems,
                                       std::unordered_map<std::string, const toml::node*>& nodes) {
  std::vector<Candidate> out;
  if (doc.get("candidates") == nullptr) {
    problems.add(
        "candidates: missing; add a [[candidates]] table with pack = \"<pack directory>\" for "
        "each candidate");
    return out;
  }
  const toml::array* array = table_array(doc, "candidates", problems);
  if (array == nullptr) return out;
  if (array->empty()) {
    problems.add("candidates", array, "is empty; add a [[candidates]] table for each candidate");
  }
  std::unordered_map<std::string, std::string> names;  // name -> key of the candidate
  for (std::size_t i = 0; i < array->size(); ++i) {
    const std::string key = item_key("candidates", i);
    const toml::node& item = *array->get(i);
    const toml::table* table = item.as_table();
    if (table == nullptr) {
      problems.add(key, &item, "must be a table with pack = \"...\", got " + type_name(item));
      continue;
    }
    refuse_unknown_keys(*table, key, {"pack", "expect", "extra_packs", "name"}, problems);
    Candidate candidate;
    candidate.key = key;
    auto pack = read_pack_use(*table, key, dirs, problems, nodes);
    if (const toml::node* extras = table->get("extra_packs")) {
      const std::string extras_key = key + ".extra_packs";
      if (const toml::array* list = extras->as_array()) {
        for (std::size_t j = 0; j < list->size(); ++j) {
          const std::string extra_key = item_key(extras_key, j);
          const toml::node& extra = *list->get(j);
          if (extra.is_string()) {
            // A bare directory: the same as {pack = "dir"}.
            PackUse use;
            if (extra.as_string()->get().empty()) {
              problems.add(extra_key, &extra, "must not be empty; give the pack's directory");
              continue;
            }
            use.key = extra_key;
            use.dir = dirs.add(dirs.resolve(extra.as_string()->get()), extra_key);
            nodes.emplace(extra_key, &extra);
            candidate.extras.push_back(std::move(use));
          } else if (const toml::table* extra_table = extra.as_table()) {
            refuse_unknown_keys(*extra_table, extra_key, {"pack", "expect"}, problems);
            if (auto use = read_pack_use(*extra_table, extra_key, dirs, problems, nodes)) {
              candidate.extras.push_back(std::move(*use));
            }
          } else {
            problems.add(extra_key, &extra,
                         "must be a directory or {pack = \"dir\", expect = \"sha256:...\"}, got " +
                             type_name(extra));
          }
        }
      } else {
        problems.add(extras_key, extras,
                     "must be an array of pack directories, got " + type_name(*extras));
      }
    }
    // The label's name for the candidate: `name`, or its directory's name.
    const std::string name_key = key + ".name";
    if (auto name = string_at(*table, "name", name_key, problems)) {
      candidate.name = *name;
    } else if (pack) {
      candidate.name = dirs.root(pack->dir).filename().string();
    }
    if (!candidate.name.empty() || table->get("name") != nullptr) {
      if (auto bad = store::run_text_problem(store::NewRun{.label = candidate.name});
          bad || candidate.name.empty()) {
        problems.add(table->get("name") ? name_key : key + ".pack", table->get("name"),
                     (bad ? "the candidate's name " + bad->message : "the name is empty") +
                         "; give it a plain name = \"...\"");
      } else if (auto [it, added] = names.try_emplace(candidate.name, key); !added) {
        problems.add(key, table,
                     "its name \"" + candidate.name + "\" is also the name of " + it->second +
                         ", and trial labels must tell them apart; give one of them name = "
                         "\"...\"");
      }
    }
    if (!pack) continue;
    candidate.pack = std::move(*pack);
    out.push_back(std::move(candidate));
  }
  return out;
}

std::vector<Scenario> read_scenarios(const toml::table& doc, ProblemList& problems) {
  std::vector<Scenario> out;
  const toml::array* array = table_array(doc, "scenarios", problems);
  if (array == nullptr) return out;
  if (array->empty()) {
    problems.add("scenarios", array,
                 "is empty, so the matrix has no trials; add [[scenarios]] tables, or leave "
                 "scenarios out to run each candidate until idle");
  }
  std::unordered_map<std::string, std::string> seen;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const std::string key = item_key("scenarios", i);
    const toml::node& item = *array->get(i);
    const toml::table* table = item.as_table();
    if (table == nullptr) {
      problems.add(key, &item, "must be a table with file = \"...\", got " + type_name(item));
      continue;
    }
    refuse_unknown_keys(*table, key, {"file"}, problems);
    const std::string file_key = key + ".file";
    const toml::node* file = table->get("file");
    auto spec = string_at(*table, "file", file_key, problems);
    if (file == nullptr) {
      problems.add(file_key, table,
                   "missing; add file = \"path.lua\" (or \"path.lua::fn\"), a path inside each "
                   "candidate");
      continue;
    }
    if (!spec) continue;
    // Which form is the candidates' to say, once they are read.
    auto parsed = pack::parse_any_scenario_spec(*spec);
    if (!parsed) {
      problems.add(file_key, file, escape_controls(parsed.error().message));
      continue;
    }
    if (!pack::is_confined_relative_path(parsed->path)) {
      problems.add(file_key, file,
                   "scenario path " + quoted_excerpt(parsed->path) +
                       " must be a relative path inside the candidate (no leading '/', no '..' "
                       "or '.' components, '/' as separator)");
      continue;
    }
    if (auto [it, added] = seen.try_emplace(*spec, key); !added) {
      problems.add(file_key, file,
                   quoted_excerpt(*spec) + " is also " + it->second + "; list each scenario once");
      continue;
    }
    out.push_back(Scenario{key, file, *spec, parsed->path});
  }
  return out;
}

std::vector<store::EventId> read_fork_points(const toml::table& doc, ProblemList& problems) {
  std::vector<store::EventId> out;
  const toml::node* node = doc.get("at");
  if (node == nullptr) {
    problems.add("at: missing; add at = [\"evt_...\"], the parent's events to fork at");
    return out;
  }
  std::vector<std::pair<std::string, const toml::node*>> items;
  if (node->is_string()) {
    items.emplace_back("at", node);
  } else if (const toml::array* array = node->as_array()) {
    if (array->empty()) {
      problems.add("at", node,
                   "is empty, so the matrix has no trials; list the parent's events to fork at");
    }
    for (std::size_t i = 0; i < array->size(); ++i) {
      items.emplace_back(item_key("at", i), array->get(i));
    }
  } else {
    problems.add("at", node,
                 "must be an event id or an array of event ids, got " + type_name(*node));
    return out;
  }
  std::unordered_map<std::string, std::string> seen;
  for (const auto& [key, item] : items) {
    if (!item->is_string()) {
      problems.add(key, item, "must be an event id (a string), got " + type_name(*item));
      continue;
    }
    const std::string& id = item->as_string()->get();
    if (auto bad = id_problem("fork point", id)) {
      problems.add(key, item, *bad + "; give an event id of the parent run, such as \"evt_006\"");
    } else if (auto [it, added] = seen.try_emplace(id, key); !added) {
      problems.add(key, item,
                   "fork point \"" + id + "\" is also " + it->second +
                       "; list each once (use repeat for more trials at it)");
    } else {
      out.emplace_back(id);
    }
  }
  return out;
}

// An optional integer in [min, max]; `fallback` when absent or wrong.
std::int64_t read_integer(const toml::table& doc, std::string_view key, std::int64_t fallback,
                          std::int64_t min, std::int64_t max, std::string_view what,
                          ProblemList& problems) {
  const toml::node* node = doc.get(key);
  if (node == nullptr) return fallback;
  const auto* integer = node->as_integer();
  if (integer == nullptr) {
    problems.add(key, node, "must be an integer, got " + type_name(*node));
    return fallback;
  }
  if (integer->get() < min || integer->get() > max) {
    problems.add(key, node,
                 std::to_string(integer->get()) + " is outside " + std::to_string(min) + " to " +
                     std::to_string(max) + "; " + std::string(what));
    return fallback;
  }
  return integer->get();
}

std::expected<Batch, forktrial::Problems> parse_toml(std::string_view text, const fs::path& file,
                                                     const fs::path& base) {
  if (auto bad = pack::toml_text_problem(text)) {
    return std::unexpected(forktrial::Problems(std::vector<std::string>{
        "line " + std::to_string(bad->line) + ", column " + std::to_string(bad->column) +
        ": not valid TOML: " + bad->message + " (see docs/batch-file.md)"}));
  }
  toml::table doc;
  try {
    doc = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    return std::unexpected(forktrial::Problems(std::vector<std::string>{
        "line " + std::to_string(e.source().begin.line) + ", column " +
        std::to_string(e.source().begin.column) +
        ": not valid TOML: " + escape_controls(e.description()) + " (see docs/batch-file.md)"}));
  }
  ProblemList problems;
  refuse_unknown_keys(doc, "",
                      {"name", "run", "at", "repeat", "priority", "limits", "candidates",
                       "scenarios", "keep_forks", "keep_forks_after"},
                      problems);

  Batch batch;
  batch.name = file.stem().string();
  if (auto name = string_at(doc, "name", "name", problems)) {
    if (auto bad = store::run_text_problem(store::NewRun{.label = *name}); bad || name->empty()) {
      problems.add("name", doc.get("name"),
                   (bad ? "the batch's " + bad->message : "is empty") +
                       "; give a plain label, or leave name out to use the file name");
    } else {
      batch.name = *name;
    }
  }
  store::RunId run;
  if (auto id = string_at(doc, "run", "run", problems)) {
    if (auto bad = id_problem("run id", *id)) {
      problems.add("run", doc.get("run"), *bad + "; give the parent run's id");
    } else {
      run = store::RunId(*id);
    }
  } else if (doc.get("run") == nullptr) {
    problems.add("run: missing; add run = \"<parent run id>\"");
  }
  const std::vector<store::EventId> ats = read_fork_points(doc, problems);
  const auto repeat = static_cast<std::uint64_t>(
      read_integer(doc, "repeat", 1, 1, static_cast<std::int64_t>(kMaxBatchTrials),
                   "repeat is how many times each trial runs, at least 1", problems));
  batch.priority = static_cast<int>(
      read_integer(doc, "priority", 0, std::numeric_limits<int>::min(),
                   std::numeric_limits<int>::max(), "higher priorities run first", problems));
  const sandbox::TrialLimits limits = read_limits(doc, problems);
  if (auto keep = string_at(doc, "keep_forks", "keep_forks", problems)) {
    RetentionPolicy retention;
    if (auto parsed = parse_keep_forks(*keep)) {
      retention.keep = *parsed;
    } else {
      problems.add("keep_forks", doc.get("keep_forks"),
                   "\"" + escape_controls(*keep) +
                       "\" is not a retention; give all, failures (keep the forks of trials that "
                       "did not complete) or none");
    }
    if (auto after = string_at(doc, "keep_forks_after", "keep_forks_after", problems)) {
      if (auto age = parse_retention_age(*after)) {
        retention.after = *age;
      } else {
        problems.add("keep_forks_after", doc.get("keep_forks_after"),
                     "\"" + escape_controls(*after) +
                         "\" is not an age; give a number and a unit, such as \"7d\" or \"12h\"");
      }
    }
    batch.retention = retention;
  } else if (doc.get("keep_forks_after") != nullptr) {
    problems.add("keep_forks_after", doc.get("keep_forks_after"),
                 "is given without keep_forks; add keep_forks = \"all\", \"failures\" or \"none\"");
  }

  PackDirectories dirs(base);
  std::unordered_map<std::string, const toml::node*> nodes;
  const std::vector<Candidate> candidates = read_candidates(doc, dirs, problems, nodes);
  const std::vector<Scenario> scenarios = read_scenarios(doc, problems);

  // The size of the matrix, refused before anything is expanded (or hashed).
  const std::uint64_t scenario_count = doc.get("scenarios") ? scenarios.size() : 1;
  std::optional<std::uint64_t> total = candidates.size();
  for (std::uint64_t factor : {scenario_count, std::uint64_t{ats.size()}, repeat}) {
    if (total) total = bounded_product(*total, factor, kMaxBatchTrials);
  }
  if (!total) {
    problems.add("the matrix of " + std::to_string(candidates.size()) + " candidates x " +
                 std::to_string(scenario_count) + " scenarios x " + std::to_string(ats.size()) +
                 " fork points x " + std::to_string(repeat) + " repeats is more than the " +
                 std::to_string(kMaxBatchTrials) +
                 " trials a batch may hold; split it into several batches");
    return std::unexpected(forktrial::Problems(problems.take()));
  }

  dirs.read_all();
  dirs.report_unreadable(problems, nodes);
  dirs.report_not_packs(problems, nodes);
  for (const Candidate& candidate : candidates) {
    const auto check = [&](const PackUse& use) {
      const pack::PackFiles* files = dirs.files(use.dir);
      if (files != nullptr && use.expect) {
        check_pin(*use.expect, use.expect_key, use.expect_node, *files, problems);
      }
    };
    check(candidate.pack);
    for (const PackUse& extra : candidate.extras) check(extra);
    // Each scenario must be a file of each candidate its executor runs: a
    // Lua file as the runtime will look it up (among the hashed files), or
    // an activegraph pack's Python file.
    if (const pack::PackFiles* files = dirs.files(candidate.pack.dir)) {
      const pack::Executor executor = executor_of_dir(*files);
      if (executor == pack::Executor::lua) {
        if (auto bad = sandbox::lua_limits_problem(limits)) {
          problems.add("in " + candidate.key + " (" + escape_controls(candidate.name) +
                       "): " + *bad);
        }
      }
      for (const Scenario& scenario : scenarios) {
        if (auto bad =
                pack::scenario_file_problem(*files, executor, scenario.spec, "scenario path")) {
          problems.add(scenario.key + ".file", scenario.node,
                       "in " + candidate.key + " (" + escape_controls(candidate.name) +
                           "): " + escape_controls(bad->message));
        }
      }
    }
  }
  if (!problems.empty()) return std::unexpected(forktrial::Problems(problems.take()));

  batch.packs = dirs.packs();
  batch.trials.reserve(*total);
  batch.candidates.reserve(*total);
  sandbox::TrialSpecification spec;
  spec.parent_run_id = run;
  spec.limits = limits;
  const auto pinned = [&](const PackUse& use) {
    return sandbox::PackSource{dirs.root(use.dir).string(), dirs.files(use.dir)->bundle_hash(),
                               true};
  };
  std::size_t listed = 0;
  std::uint64_t unlisted = 0;
  for (const Candidate& candidate : candidates) {
    spec.candidate = pinned(candidate.pack);
    spec.extra_packs.clear();
    for (const PackUse& extra : candidate.extras) spec.extra_packs.push_back(pinned(extra));
    for (std::uint64_t s = 0; s < scenario_count; ++s) {
      spec.scenario = scenarios.empty() ? std::string() : scenarios[s].spec;
      const std::string prefix = batch.name + " " + candidate.name + " " +
                                 (scenarios.empty() ? std::string("idle") : spec.scenario) + "@";
      for (const store::EventId& at : ats) {
        spec.at_event = at;
        for (std::uint64_t r = 1; r <= repeat; ++r) {
          spec.label = prefix + at.str() + " #" + std::to_string(r);
          // A backstop: every part of the specification was checked above.
          for (std::string& problem : sandbox::check_trial_specification(spec)) {
            if (listed < kMaxTrialProblemsListed) {
              problems.add("trial \"" + escape_controls(spec.label) + "\": " + problem);
              ++listed;
            } else {
              ++unlisted;
            }
          }
          batch.trials.push_back(spec);
          batch.candidates.push_back(candidate.name);
        }
      }
    }
  }
  if (unlisted > 0) {
    problems.add("... and " + std::to_string(unlisted) + " more problems with trials");
  }
  if (!problems.empty()) return std::unexpected(forktrial::Problems(problems.take()));
  return batch;
}

// ---- JSON Lines ------------------------------------------------------------

std::expected<Batch, forktrial::Problems> parse_json_lines(std::string_view text,
                                                           const fs::path& file,
                                                           const fs::path& base) {
  ProblemList problems;
  Batch batch;
  batch.name = file.stem().string();
  const std::vector<std::string_view> lines = split_lines(text);
  std::uint64_t count = 0;
  for (std::string_view line : lines) {
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) ++count;
  }
  if (count > kMaxBatchTrials) {
    problems.add(std::to_string(count) + " trial specifications are more than the " +
                 std::to_string(kMaxBatchTrials) +
                 " a batch may hold; split the file into several batches");
    return std::unexpected(forktrial::Problems(problems.take()));
  }
  if (count == 0) {
    problems.add(
        "no trials: the file holds no trial specification; write one JSON object per line");
    return std::unexpected(forktrial::Problems(problems.take()));
  }

  // Each use of a pack: the trial, which of its packs (-1: the candidate),
  // and its directory.
  struct Use {
    std::size_t line;
    std::size_t trial;
    std::ptrdiff_t extra;
    std::size_t dir;
  };
  PackDirectories dirs(base);
  std::vector<Use> uses;
  batch.trials.reserve(count);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "line " + std::to_string(i + 1);
    auto spec = sandbox::parse_trial_specification(line);
    if (!spec) {
      for (const std::string& problem : spec.error().list) {
        problems.add(where + ": " + escape_controls(problem));
      }
      continue;
    }
    const std::size_t before = problems.size();
    for (const std::string& problem : sandbox::check_trial_specification(*spec)) {
      problems.add(where + ": " + problem);
    }
    if (auto bad = id_problem("run id", spec->parent_run_id.str())) {
      problems.add(where + ": parent_run_id: " + *bad);
    }
    if (auto bad = id_problem("fork point", spec->at_event.str())) {
      problems.add(where + ": at_event: " + *bad);
    }
    if (!spec->scenario.empty()) {
      // The file itself is looked up once the candidate is read, below.
      if (auto parsed = pack::parse_any_scenario_spec(spec->scenario); !parsed) {
        problems.add(where + ": scenario: " + escape_controls(parsed.error().message));
      }
    }
    if (problems.size() != before) continue;
    const std::size_t trial = batch.trials.size();
    const auto use = [&](sandbox::PackSource& pack, std::ptrdiff_t extra) {
      const std::string key =
          where + ": " + (extra < 0 ? std::string("candidate") : item_key("extra_packs", extra)) +
          ".root_dir";
      pack.root_dir = dirs.resolve(pack.root_dir).string();
      uses.push_back(Use{i + 1, trial, extra, dirs.add(pack.root_dir, key)});
    };
    use(spec->candidate, -1);
    for (std::size_t e = 0; e < spec->extra_packs.size(); ++e) {
      use(spec->extra_packs[e], static_cast<std::ptrdiff_t>(e));
    }
    batch.candidates.push_back(
        std::filesystem::path(spec->candidate.root_dir).lexically_normal().filename().string());
    batch.trials.push_back(std::move(*spec));
  }

  dirs.read_all();
  dirs.report_unreadable(problems, {});
  std::set<std::size_t> not_packs;                  // reported once each
  std::map<std::size_t, pack::Executor> executors;  // by directory
  for (const Use& use : uses) {
    const pack::PackFiles* files = dirs.files(use.dir);
    if (files == nullptr) continue;
    sandbox::TrialSpecification& spec = batch.trials[use.trial];
    sandbox::PackSource& pack =
        use.extra < 0 ? spec.candidate : spec.extra_packs[static_cast<std::size_t>(use.extra)];
    const std::string where = "line " + std::to_string(use.line) + ": ";
    if (!not_packs.contains(use.dir)) {
      const std::optional<std::string> bad =
          pack.manifest_required ? dirs.manifest_problem(use.dir) : dirs.marker_problem(use.dir);
      if (bad) {
        problems.add(where + *bad);
        not_packs.insert(use.dir);
      }
    }
    const std::string field =
        (use.extra < 0 ? std::string("candidate") : item_key("extra_packs", use.extra)) +
        ".expected_bundle_hash";
    if (pack.expected_bundle_hash && *pack.expected_bundle_hash != files->bundle_hash()) {
      check_pin(pack.expected_bundle_hash->str(), where + field, nullptr, *files, problems);
    }
    pack.expected_bundle_hash = files->bundle_hash();
    if (use.extra < 0) {
      // Told once per directory: a batch of a million trials of one pack
      // looks at it once.
      auto known = executors.find(use.dir);
      if (known == executors.end())
        known = executors.emplace(use.dir, executor_of_dir(*files)).first;
      const pack::Executor executor = known->second;
      if (executor == pack::Executor::lua) {
        if (auto bad = sandbox::lua_limits_problem(spec.limits)) problems.add(where + *bad);
      }
      if (spec.scenario.empty()) continue;
      if (auto bad =
              pack::scenario_file_problem(*files, executor, spec.scenario, "scenario path")) {
        problems.add(where + "scenario: " + escape_controls(bad->message));
      }
    }
  }
  if (!problems.empty()) return std::unexpected(forktrial::Problems(problems.take()));
  batch.packs = dirs.packs();
  return batch;
}

}  // namespace

BatchFormat detect_batch_format(const std::filesystem::path& file, std::string_view text) {
  if (file.extension() == ".jsonl") return BatchFormat::json_lines;
  if (file.extension() == ".toml") return BatchFormat::toml;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' ? BatchFormat::json_lines
                                                               : BatchFormat::toml;
}

std::expected<Batch, forktrial::Problems> parse_batch(std::string_view text,
                                                      const std::filesystem::path& file) {
  std::error_code error;
  fs::path base = fs::absolute(file, error).parent_path();
  if (error) base = file.parent_path();
  if (detect_batch_format(file, text) == BatchFormat::json_lines) {
    return parse_json_lines(text, file, base);
  }
  if (text.size() > kMaxTomlBatchBytes) {
    return std::unexpected(forktrial::Problems(std::vector<std::string>{
        "the TOML batch file is " + std::to_string(text.size()) + " bytes, more than the " +
        std::to_string(kMaxTomlBatchBytes) +
        " a matrix needs; write many trials as a matrix, or as JSON Lines (.jsonl)"}));
  }
  return parse_toml(text, file, base);
}

std::expected<Batch, Problems> read_batch_file(const std::filesystem::path& file) {
  const std::string name = escape_controls(file.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return std::unexpected(forktrial::Problems(
        std::vector<std::string>{name + ": cannot open the batch file: " + std::strerror(errno)}));
  }
  // Read in blocks up to the limit, so that a huge file (or a device that
  // never ends) is refused without being held.
  std::string text;
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    text.append(block, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxJsonLinesBatchBytes) {
      return std::unexpected(forktrial::Problems(std::vector<std::string>{
          name + ": larger than " + std::to_string(kMaxJsonLinesBatchBytes >> 20) +
          " MiB; split it into several batches"}));
    }
  }
  if (in.bad()) {
    return std::unexpected(forktrial::Problems(
        std::vector<std::string>{name + ": cannot read the batch file: " + std::strerror(errno)}));
  }
  return parse_batch(text, file);
}

}  // namespace forktrial::coordinator
