#include "sandbox/trial_types.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/digest.h"
#include "sandbox/rlimits.h"
#include "store/event.h"

namespace forktrial::sandbox {
namespace {

using nlohmann::json;

std::string json_type(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

json limits_json(const TrialLimits& limits) {
  return {
      {"wall_clock_seconds", limits.wall_clock_seconds},
      {"max_rss_bytes", limits.max_rss_bytes ? json(*limits.max_rss_bytes) : json(nullptr)},
      {"max_events", limits.max_events},
      {"max_llm_calls", limits.max_llm_calls},
      {"max_cpu_seconds", limits.max_cpu_seconds ? json(*limits.max_cpu_seconds) : json(nullptr)},
      {"max_appended_events", limits.max_appended_events},
      {"max_appended_bytes", limits.max_appended_bytes},
      {"env_passthrough", limits.env_passthrough}};
}

json pack_json(const PackSource& pack) {
  return {{"root_dir", pack.root_dir},
          {"expected_bundle_hash",
           pack.expected_bundle_hash ? json(pack.expected_bundle_hash->str()) : json(nullptr)},
          {"manifest_required", pack.manifest_required}};
}

// Reads fields of one JSON object, recording a problem per bad field and
// one per unknown field.
class Fields {
 public:
  Fields(const json& object, std::string prefix, std::vector<std::string>& problems)
      : object_(object), prefix_(std::move(prefix)), problems_(problems) {}

  std::string name(std::string_view key) const { return prefix_ + std::string(key); }
  void problem(std::string_view key, const std::string& text) {
    problems_.push_back(name(key) + ": " + text);
  }

  const json* get(std::string_view key, bool required) {
    known_.emplace_back(key);
    auto it = object_.find(std::string(key));
    if (it == object_.end()) {
      if (required) problem(key, "missing");
      return nullptr;
    }
    return &*it;
  }

  std::optional<std::string> string(std::string_view key, bool required, bool non_empty) {
    const json* v = get(key, required);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      problem(key, "must be a string, got " + json_type(*v));
      return std::nullopt;
    }
    std::string text = v->get<std::string>();
    if (non_empty && text.empty()) {
      problem(key, "must not be empty");
      return std::nullopt;
    }
    return text;
  }

  std::optional<std::uint64_t> count(std::string_view key) {
    const json* v = get(key, false);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0)) {
      problem(key,
              "must be a non-negative integer, got " +
                  (v->is_number_integer() ? std::string("a negative integer") : json_type(*v)));
      return std::nullopt;
    }
    return v->get<std::uint64_t>();
  }

  std::optional<bool> boolean(std::string_view key) {
    const json* v = get(key, false);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      problem(key, "must be true or false, got " + json_type(*v));
      return std::nullopt;
    }
    return v->get<bool>();
  }

  void reject_unknown() {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
        problem(key, "unknown field (this build reads trial specification schema_version " +
                         std::to_string(TrialSpecification::kSchemaVersion) + ")");
      }
    }
  }

 private:
  const json& object_;
  std::string prefix_;
  std::vector<std::string>& problems_;
  std::vector<std::string> known_;
};

std::optional<PackSource> parse_pack(const json& value, const std::string& field,
                                     std::vector<std::string>& problems) {
  if (!value.is_object()) {
    problems.push_back(field + ": must be an object, got " + json_type(value));
    return std::nullopt;
  }
  const std::size_t before = problems.size();
  Fields f(value, field + ".", problems);
  PackSource pack;
  if (auto root = f.string("root_dir", true, true)) pack.root_dir = *root;
  // activegraph writes "" for an unpinned pack, forktrial null.
  if (const json* pin = f.get("expected_bundle_hash", false);
      pin && !pin->is_null() && !(pin->is_string() && pin->get_ref<const std::string&>().empty())) {
    if (!pin->is_string()) {
      f.problem("expected_bundle_hash", "must be a string or null, got " + json_type(*pin));
    } else if (auto bad = Digest::describe_pin_problem(pin->get<std::string>())) {
      f.problem("expected_bundle_hash",
                "malformed pin \"" + pin->get<std::string>() + "\": " + *bad);
    } else {
      pack.expected_bundle_hash = Digest::parse(pin->get<std::string>());
    }
  }
  if (auto required = f.boolean("manifest_required")) pack.manifest_required = *required;
  f.reject_unknown();
  if (problems.size() != before) return std::nullopt;
  return pack;
}

bool is_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

void parse_limits(const json& value, TrialLimits& limits, std::vector<std::string>& problems) {
  if (!value.is_object()) {
    problems.push_back("limits: must be an object, got " + json_type(value));
    return;
  }
  Fields f(value, "limits.", problems);
  if (const json* wall = f.get("wall_clock_seconds", false)) {
    if (!wall->is_number()) {
      f.problem("wall_clock_seconds",
                "must be a number of seconds (0 disables the net), got " + json_type(*wall));
    } else {
      limits.wall_clock_seconds = wall->get<double>();
    }
  }
  if (const json* rss = f.get("max_rss_bytes", false)) {
    if (rss->is_null()) {
      limits.max_rss_bytes.reset();
    } else if (!rss->is_number_unsigned() &&
               !(rss->is_number_integer() && rss->get<std::int64_t>() >= 0)) {
      f.problem("max_rss_bytes", "must be a non-negative integer or null, got " + json_type(*rss));
    } else {
      limits.max_rss_bytes = rss->get<std::uint64_t>();
    }
  }
  // activegraph allows null for these: no budget, which is forktrial's 0.
  if (const json* events = f.get("max_events", false); events && events->is_null()) {
    limits.max_events = 0;
  } else if (auto count = f.count("max_events")) {
    limits.max_events = *count;
  }
  if (const json* calls = f.get("max_llm_calls", false); calls && calls->is_null()) {
    limits.max_llm_calls = 0;
  } else if (auto count = f.count("max_llm_calls")) {
    limits.max_llm_calls = *count;
  }
  if (const json* cpu = f.get("max_cpu_seconds", false); cpu && !cpu->is_null()) {
    if (!cpu->is_number_unsigned() && !(cpu->is_number_integer() && cpu->get<std::int64_t>() > 0)) {
      f.problem("max_cpu_seconds", "must be a positive integer or null, got " + json_type(*cpu));
    } else {
      limits.max_cpu_seconds = cpu->get<std::uint64_t>();
    }
  }
  if (auto events = f.count("max_appended_events")) limits.max_appended_events = *events;
  if (auto bytes = f.count("max_appended_bytes")) limits.max_appended_bytes = *bytes;
  if (const json* names = f.get("env_passthrough", false)) {
    if (!names->is_array()) {
      f.problem("env_passthrough", "must be an array of variable names, got " + json_type(*names));
    } else {
      for (std::size_t i = 0; i < names->size(); ++i) {
        const json& name = (*names)[i];
        std::string field = "env_passthrough[" + std::to_string(i) + "]";
        if (!name.is_string() || !is_env_name(name.get<std::string>())) {
          f.problem(field, "must be an environment variable name (letters, digits, '_'), got " +
                               (name.is_string() ? "\"" + name.get<std::string>() + "\""
                                                 : json_type(name)));
        } else {
          limits.env_passthrough.push_back(name.get<std::string>());
        }
      }
    }
  }
  f.reject_unknown();
  // Only values that parsed are in `limits`; their ranges are checked once,
  // by the rule every caller uses.
  if (problems.empty()) {
    for (auto& problem : check_trial_limits(limits)) problems.push_back(std::move(problem));
  }
}

std::string seconds_text(double seconds) {
  return json(seconds).dump();
}

}  // namespace

std::vector<std::string> check_trial_limits(const TrialLimits& limits) {
  std::vector<std::string> problems;
  const double wall = limits.wall_clock_seconds;
  if (!std::isfinite(wall) || wall < 0) {
    problems.push_back(
        "limits.wall_clock_seconds: must be a finite, non-negative number of "
        "seconds (0 disables the net), got " +
        std::string(std::isnan(wall)   ? "nan"
                    : std::isinf(wall) ? (wall > 0 ? "inf" : "-inf")
                                       : seconds_text(wall)));
  } else if (wall > 0 && wall < kMinWallClockSeconds) {
    problems.push_back("limits.wall_clock_seconds: " + seconds_text(wall) +
                       " s is below the 1 ms the wall-clock net can measure; give at least " +
                       seconds_text(kMinWallClockSeconds) + " (0 disables the net)");
  } else if (wall > kMaxWallClockSeconds) {
    problems.push_back("limits.wall_clock_seconds: " + seconds_text(wall) +
                       " s is more than the 7 days (" + seconds_text(kMaxWallClockSeconds) +
                       " s) a trial may be given; give less (0 disables the net)");
  }
  if (limits.max_rss_bytes && *limits.max_rss_bytes > kMaxMaxRssBytes) {
    problems.push_back("limits.max_rss_bytes: " + std::to_string(*limits.max_rss_bytes) +
                       " bytes is more than the " + std::to_string(kMaxMaxRssBytes) +
                       " (1 TiB) a trial may be given; 0 or null disables the net");
  }
  if (limits.max_cpu_seconds &&
      (*limits.max_cpu_seconds == 0 ||
       static_cast<double>(*limits.max_cpu_seconds) > kMaxWallClockSeconds)) {
    problems.push_back("limits.max_cpu_seconds: " + std::to_string(*limits.max_cpu_seconds) +
                       " is outside 1 to " + seconds_text(kMaxWallClockSeconds) +
                       " seconds; leave it unset for the wall clock plus 5 s");
  }
  for (std::size_t i = 0; i < limits.env_passthrough.size(); ++i) {
    if (!is_env_name(limits.env_passthrough[i])) {
      problems.push_back("limits.env_passthrough[" + std::to_string(i) +
                         "]: must be an environment variable name (letters, digits, '_'), got \"" +
                         limits.env_passthrough[i] + "\"");
    }
  }
  return problems;
}

std::optional<std::string> lua_limits_problem(const TrialLimits& limits) {
  if (!limits.max_rss_bytes || *limits.max_rss_bytes == 0 ||
      *limits.max_rss_bytes >= kMinMaxRssBytes) {
    return std::nullopt;
  }
  return "limits.max_rss_bytes: " + std::to_string(*limits.max_rss_bytes) + " bytes is below the " +
         std::to_string(kMinMaxRssBytes) +
         " (64 MiB) forktrial's Lua child runs in; give at least that (0 or null disables the "
         "net; an activegraph pack takes a smaller cap)";
}

std::vector<std::string> check_trial_specification(const TrialSpecification& spec) {
  std::vector<std::string> problems;
  if (spec.parent_run_id.empty()) problems.push_back("parent_run_id: must not be empty");
  if (spec.at_event.empty()) problems.push_back("at_event: must not be empty");
  if (spec.label.empty()) {
    problems.push_back("label: must not be empty");
  } else if (auto bad = store::run_text_problem(store::NewRun{.label = spec.label})) {
    // The fork's label: refused here rather than by the store after the run.
    problems.push_back(bad->message);
  }
  auto check_pack = [&](const PackSource& pack, const std::string& field) {
    if (pack.root_dir.empty()) problems.push_back(field + ".root_dir: must not be empty");
  };
  for (std::size_t i = 0; i < spec.extra_packs.size(); ++i) {
    check_pack(spec.extra_packs[i], "extra_packs[" + std::to_string(i) + "]");
  }
  check_pack(spec.candidate, "candidate");
  for (auto& problem : check_trial_limits(spec.limits)) problems.push_back(std::move(problem));
  return problems;
}

int exit_code_of(Outcome outcome) {
  switch (outcome) {
    case Outcome::completed:
      return 0;
    case Outcome::scenario_failed:
      return 30;
    case Outcome::limits_exceeded:
      return 40;
    case Outcome::materialization_failed:
      return 50;
    case Outcome::crashed:
      break;
  }
  return -1;
}

Outcome outcome_of_exit_code(int code) {
  switch (code) {
    case 0:
      return Outcome::completed;
    case 30:
      return Outcome::scenario_failed;
    case 40:
      return Outcome::limits_exceeded;
    case 50:
      return Outcome::materialization_failed;
    default:
      return Outcome::crashed;
  }
}

std::vector<const PackSource*> packs_in_load_order(const TrialSpecification& spec) {
  std::vector<const PackSource*> packs;
  for (const auto& extra : spec.extra_packs) packs.push_back(&extra);
  packs.push_back(&spec.candidate);
  return packs;
}

std::string to_canonical_json(const TrialLimits& limits) {
  return limits_json(limits).dump();
}

std::expected<TrialLimits, Problems> parse_trial_limits(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded())
    return std::unexpected(Problems(std::vector<std::string>{"limits: not valid JSON"}));
  std::vector<std::string> problems;
  TrialLimits limits;
  parse_limits(doc, limits, problems);
  if (!problems.empty()) return std::unexpected(Problems(std::move(problems)));
  return limits;
}

std::string to_canonical_json(const TrialSpecification& spec) {
  json extras = json::array();
  for (const auto& pack : spec.extra_packs) extras.push_back(pack_json(pack));
  json limits = limits_json(spec.limits);
  // nlohmann::json keeps object keys sorted, and dump() without an indent
  // writes no whitespace: the output is canonical.
  json out{{"schema_version", TrialSpecification::kSchemaVersion},
           {"parent_run_id", spec.parent_run_id.str()},
           {"at_event", spec.at_event.str()},
           {"label", spec.label},
           {"candidate", pack_json(spec.candidate)},
           {"extra_packs", extras},
           {"scenario", spec.scenario},
           {"limits", limits}};
  return out.dump();
}

std::expected<TrialSpecification, Problems> parse_trial_specification(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) {
    return std::unexpected(
        Problems(std::vector<std::string>{"trial specification: not valid JSON"}));
  }
  if (!doc.is_object()) {
    return std::unexpected(Problems(std::vector<std::string>{
        "trial specification: must be a JSON object, got " + json_type(doc)}));
  }
  std::vector<std::string> problems;
  Fields f(doc, "", problems);
  const json* version = f.get("schema_version", true);
  if (version != nullptr) {
    if (!version->is_number_integer()) {
      f.problem("schema_version", "must be an integer, got " + json_type(*version));
    } else if (version->get<std::int64_t>() != TrialSpecification::kSchemaVersion) {
      // A different version may mean anything: refuse before reading further.
      return std::unexpected(Problems(std::vector<std::string>{
          "schema_version: this build reads trial specifications of version " +
          std::to_string(TrialSpecification::kSchemaVersion) + ", got " + version->dump() +
          "; run a forktrial that supports it"}));
    }
  }
  TrialSpecification spec;
  if (auto run = f.string("parent_run_id", true, true)) spec.parent_run_id = store::RunId(*run);
  if (auto at = f.string("at_event", true, true)) spec.at_event = store::EventId(*at);
  if (auto label = f.string("label", false, true)) spec.label = *label;
  // The candidate: forktrial's `candidate` or activegraph's `pack_source`.
  const json* candidate = f.get("candidate", false);
  const json* pack_source = f.get("pack_source", false);
  if (candidate != nullptr && pack_source != nullptr) {
    problems.push_back(
        "candidate, pack_source: both given; give the candidate pack once, as candidate "
        "(forktrial) or pack_source (activegraph)");
  } else if (candidate == nullptr && pack_source == nullptr) {
    problems.push_back("candidate: missing");
  } else if (candidate != nullptr) {
    if (auto pack = parse_pack(*candidate, "candidate", problems)) spec.candidate = *pack;
  } else if (auto pack = parse_pack(*pack_source, "pack_source", problems)) {
    spec.candidate = *pack;
  }
  if (auto store_path = f.string("store_path", false, false)) spec.store_path = *store_path;
  if (const json* extras = f.get("extra_packs", false)) {
    if (!extras->is_array()) {
      f.problem("extra_packs", "must be an array, got " + json_type(*extras));
    } else {
      for (std::size_t i = 0; i < extras->size(); ++i) {
        if (auto pack =
                parse_pack((*extras)[i], "extra_packs[" + std::to_string(i) + "]", problems)) {
          spec.extra_packs.push_back(*pack);
        }
      }
    }
  }
  if (auto scenario = f.string("scenario", false, false)) spec.scenario = *scenario;
  if (const json* limits = f.get("limits", false)) parse_limits(*limits, spec.limits, problems);
  f.reject_unknown();
  if (!problems.empty()) return std::unexpected(Problems(std::move(problems)));
  return spec;
}

std::string_view isolation_name(Isolation isolation) {
  return isolation == Isolation::strict ? "strict" : "standard";
}

std::optional<Isolation> parse_isolation(std::string_view name) {
  if (name == "standard") return Isolation::standard;
  if (name == "strict") return Isolation::strict;
  return std::nullopt;
}

std::string_view net_state_name(NetState state) {
  switch (state) {
    case NetState::applied:
      return "applied";
    case NetState::degraded:
      return "degraded";
    case NetState::off:
      return "off";
  }
  return "off";
}

std::string isolation_json(const TrialIsolation& isolation) {
  nlohmann::ordered_json nets = nlohmann::ordered_json::array();
  for (const TrialNet& net : isolation.nets) {
    nets.push_back({{"name", net.name},
                    {"state", std::string(net_state_name(net.state))},
                    {"detail", net.detail}});
  }
  return nlohmann::ordered_json{{"level", std::string(isolation_name(isolation.level))},
                                {"nets", std::move(nets)}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TrialIsolation trial_isolation(Isolation level, const TrialLimits& limits,
                               const std::vector<std::string>& warnings,
                               std::string_view executor) {
  const bool lua = executor != "activegraph";
  TrialIsolation out{level, {}};
  // The first warning starting with one of `prefixes`, if any.
  const auto warned = [&](std::initializer_list<std::string_view> prefixes) -> const std::string* {
    for (const std::string& warning : warnings) {
      for (std::string_view prefix : prefixes) {
        if (warning.starts_with(prefix)) return &warning;
      }
    }
    return nullptr;
  };
  const auto net = [&](std::string name, bool on, std::string what,
                       std::initializer_list<std::string_view> prefixes) {
    TrialNet n{std::move(name), NetState::off, std::move(what)};
    if (on) {
      n.state = NetState::applied;
      if (const std::string* warning = warned(prefixes)) {
        n.state = NetState::degraded;
        n.detail = *warning;
      }
    }
    out.nets.push_back(std::move(n));
  };
  const bool memory = limits.max_rss_bytes && *limits.max_rss_bytes > 0;
  net("process", true, "a fresh child process per trial, in its own process group", {});
  net("memory", memory,
      memory ? (lua ? "RLIMIT_AS and the Lua allocator cap at " : "RLIMIT_AS at ") +
                   std::to_string(*limits.max_rss_bytes) + " bytes"
             : "max_rss_bytes is not set",
      {"memory net degraded"});
  const std::uint64_t cpu = cpu_seconds_for(limits);
  net("cpu", cpu > 0,
      cpu > 0 ? "RLIMIT_CPU at " + std::to_string(cpu) + " s" : "max_cpu_seconds is 0",
      {"CPU net degraded"});
  net("wall_clock", limits.wall_clock_seconds > 0,
      limits.wall_clock_seconds > 0
          ? "killed after " + nlohmann::json(limits.wall_clock_seconds).dump() + " s"
          : "wall_clock_seconds is 0",
      {});
  const bool budget = limits.max_appended_events > 0 || limits.max_appended_bytes > 0;
  net("write_budget", budget,
      budget ? std::to_string(limits.max_appended_events) + " events, " +
                   std::to_string(limits.max_appended_bytes) + " bytes"
             : "max_appended_events and max_appended_bytes are 0",
      {});
  net("environment", true, "PATH, HOME, LANG and the names passed through only", {});
  const bool strict = level == Isolation::strict;
  const std::string standard = "not asked for: the trial ran under standard isolation";
  net("namespaces", strict, strict ? "user, mount, PID, network and IPC namespaces" : standard,
      {"namespaces unavailable", "PID namespace init"});
  net("filesystem", strict,
      strict ? (lua ? "a root holding only its packs and its scratch store"
                    : "a root holding only its packs, its scratch store, and read-only the "
                      "system's programs and libraries and the interpreter's directories")
             : standard,
      {"filesystem net degraded", "namespaces unavailable"});
  net("seccomp", strict, strict ? "a system-call allow-list" : standard,
      {"seccomp net unavailable"});
  net("cgroup", strict, strict ? "real memory and tasks capped" : standard,
      {"cgroup net unavailable"});
  net("privileges", strict, strict ? "every capability dropped, no_new_privs" : standard,
      {"privileges not dropped"});
  return out;
}

}  // namespace forktrial::sandbox
