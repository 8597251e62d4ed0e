#include "sandbox/activegraph_child.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/text.h"
#include "base/timestamp.h"
#include "import/activegraph_scratch.h"
#include "pack/bundle_hash.h"
#include "sandbox/delta.h"
#include "sandbox/scratch.h"
#include "sandbox/strict_parent.h"
#include "sandbox/tail.h"

extern char** environ;

namespace forktrial::sandbox {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// What the probe prints: where activegraph is, its version, and the
// interpreter's path.
constexpr const char* kProbeScript = R"(import json, os, sys
try:
    import activegraph
except BaseException as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
    sys.exit(3)
root = os.path.dirname(os.path.dirname(os.path.abspath(activegraph.__file__)))
print(json.dumps({"root": root, "version": str(getattr(activegraph, "__version__", "")),
                  "path": [p for p in sys.path if p and os.path.isdir(p)],
                  "executable": sys.executable}))
)";

constexpr std::size_t kDetailBytes = 4096;

// `name` as the program to run: itself when it holds a slash, else the first
// executable of that name on PATH.
std::optional<std::filesystem::path> program_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return std::filesystem::absolute(name);
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    const auto candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// The last line of `out` that parses as a JSON object holding `key`.
std::optional<json> last_object_with(std::string_view out, std::string_view key) {
  while (!out.empty()) {
    if (out.back() == '\n') out.remove_suffix(1);
    const auto newline = out.rfind('\n');
    const std::string_view line = newline == std::string_view::npos ? out : out.substr(newline + 1);
    auto parsed = json::parse(line, nullptr, false);
    if (parsed.is_object() && parsed.contains(key)) return parsed;
    out = newline == std::string_view::npos ? std::string_view{} : out.substr(0, newline);
  }
  return std::nullopt;
}

void append_line(std::string& detail, const std::string& line) {
  if (line.empty()) return;
  if (!detail.empty()) detail += '\n';
  detail += line;
}

// What the child wrote on stderr, for a detail: its own diagnostics (a
// traceback) and nothing a tail could pose as.
std::string stderr_detail(const ChildResult& child) {
  if (child.stderr_tail.empty()) return "";
  const std::string_view text = child.stderr_tail;
  return "child diagnostics (stderr, last bytes):\n" +
         bounded_text(text.size() > kDetailBytes ? text.substr(text.size() - kDetailBytes) : text,
                      kDetailBytes);
}

std::uint64_t cpu_seconds(const TrialLimits& limits) {
  if (limits.max_cpu_seconds) return *limits.max_cpu_seconds;
  return static_cast<std::uint64_t>(limits.wall_clock_seconds) + 5;
}

ordered_json pack_json(const PackSource& pack) {
  return ordered_json{
      {"pack_root", std::filesystem::absolute(pack.root_dir).lexically_normal().string()},
      {"expected_bundle_hash", pack.expected_bundle_hash ? pack.expected_bundle_hash->str() : ""},
      {"manifest_required", pack.manifest_required}};
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += ':';
    out += part;
  }
  return out;
}

// What a confined CPython reads: the system's programs and libraries, the
// interpreter's own prefix (a virtual environment's or pyenv's lies outside
// /usr), and every directory of its PYTHONPATH; each that exists, once.
std::vector<std::string> python_dirs(const ActivegraphInstall& install) {
  std::vector<std::string> dirs;
  const auto add = [&dirs](const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return;
    const std::string text = dir.lexically_normal().string();
    if (std::ranges::find(dirs, text) == dirs.end()) dirs.push_back(text);
  };
  for (const char* system : {"/usr", "/lib", "/lib64", "/bin"}) add(system);
  std::error_code ec;
  const auto real = std::filesystem::canonical(install.python, ec);
  for (const auto& python : {install.python, ec ? install.python : real}) {
    if (!python.string().starts_with("/usr/")) add(python.parent_path().parent_path());
  }
  for (const auto& dir : install.python_path) add(dir);
  return dirs;
}

SpawnRequest python_request(const ActivegraphInstall& install, std::vector<std::string> env,
                            std::string stdin_data, std::chrono::milliseconds wall_clock) {
  SpawnRequest request;
  request.program = install.python.string();
  request.args = {"-m", "activegraph.sandbox._child"};
  env.push_back("PYTHONPATH=" + joined(install.python_path));
  // No bytecode written beside the packs, whose directories are pinned.
  env.push_back("PYTHONDONTWRITEBYTECODE=1");
  request.env = std::move(env);
  request.stdin_data = std::move(stdin_data);
  request.wall_clock = wall_clock;
  return request;
}

}  // namespace

std::expected<ActivegraphInstall, Status> find_activegraph(const std::string& python,
                                                           std::chrono::milliseconds timeout) {
  auto program = program_path(python);
  if (!program) {
    return failure(ErrorCode::unavailable, "no Python interpreter \"" + python +
                                               "\" on PATH; activegraph packs run "
                                               "in activegraph's own trial child");
  }
  SpawnRequest request;
  request.program = program->string();
  request.args = {"-c", kProbeScript};
  for (char** e = environ; *e != nullptr; ++e) request.env.emplace_back(*e);
  request.wall_clock = timeout;
  ChildResult probe;
  try {
    probe = run_child(request);
  } catch (const Error& e) {
    return failure(ErrorCode::unavailable, "cannot run " + program->string() + ": " + e.what());
  }
  auto answer = last_object_with(probe.stdout_tail, "root");
  if (!probe.exited || probe.exit_code != 0 || !answer || !(*answer)["root"].is_string()) {
    std::string why = "activegraph does not import with " + program->string();
    if (auto error = last_object_with(probe.stdout_tail, "error");
        error && (*error)["error"].is_string()) {
      why += ": " + bounded_text((*error)["error"].get<std::string>(), kDetailBytes);
    } else if (probe.wall_clock_killed) {
      why += ": the interpreter did not answer within " + std::to_string(timeout.count()) + " ms";
    }
    append_line(why, stderr_detail(probe));
    return failure(ErrorCode::unavailable, why);
  }
  ActivegraphInstall install;
  // The interpreter itself, not a wrapper that finds it (pyenv's shims are
  // shell scripts): what the child runs is what was asked.
  install.python = *program;
  if (const json& executable = (*answer)["executable"];
      executable.is_string() && executable.get<std::string>().starts_with('/') &&
      ::access(executable.get<std::string>().c_str(), X_OK) == 0) {
    install.python = executable.get<std::string>();
  }
  install.python_path.push_back((*answer)["root"].get<std::string>());
  if ((*answer)["version"].is_string()) install.version = (*answer)["version"];
  if ((*answer)["path"].is_array()) {
    for (const auto& entry : (*answer)["path"]) {
      if (!entry.is_string()) continue;
      const std::string dir = entry.get<std::string>();
      if (std::find(install.python_path.begin(), install.python_path.end(), dir) ==
          install.python_path.end()) {
        install.python_path.push_back(dir);
      }
    }
  }
  return install;
}

ActivegraphInstall activegraph_install(const ChildOptions& options) {
  if (options.activegraph) return *options.activegraph;
  static std::mutex mutex;
  static std::map<std::string, std::expected<ActivegraphInstall, Status>> found;
  std::lock_guard lock(mutex);
  auto it = found.find(options.python);
  if (it == found.end()) it = found.emplace(options.python, find_activegraph(options.python)).first;
  if (!it->second) {
    throw SandboxStartupError("the candidate is an activegraph pack, and " +
                              it->second.error().message);
  }
  return *it->second;
}

std::string activegraph_job(const std::filesystem::path& store_path, const store::RunId& fork_id,
                            std::uint64_t initial_events, const TrialSpecification& spec) {
  ordered_json extras = ordered_json::array();
  for (const auto& extra : spec.extra_packs) extras.push_back(pack_json(extra));
  ordered_json job = {{"store_path", store_path.string()},
                      {"fork_run_id", fork_id.str()},
                      {"initial_events", initial_events}};
  const ordered_json candidate = pack_json(spec.candidate);
  for (const auto& [key, value] : candidate.items()) job[key] = value;
  job["extra_packs"] = std::move(extras);
  job["scenario"] = spec.scenario;
  const TrialLimits& limits = spec.limits;
  job["limits"] = ordered_json{
      {"max_rss_bytes", limits.max_rss_bytes ? ordered_json(*limits.max_rss_bytes) : nullptr},
      {"max_events", limits.max_events},
      {"max_llm_calls", limits.max_llm_calls},
      {"cpu_seconds", cpu_seconds(limits)}};
  return job.dump();
}

namespace {

// Which net activegraph's child says stopped it: its tail has no field for
// it, so it is read from the detail the child writes for each (a
// MemoryError under RLIMIT_AS; its runtime's budget running out); none
// when the detail names neither.
Net net_in(std::string_view detail) {
  if (detail.find("MemoryError") != std::string_view::npos) return Net::memory;
  if (detail.find("budget") != std::string_view::npos) return Net::event_budget;
  return Net::none;
}

}  // namespace

TrialVerdict activegraph_verdict(const ChildResult& child, const TrialLimits& limits) {
  TrialVerdict verdict;
  verdict.exit_code = child.exited ? child.exit_code : -child.signal;
  verdict.wall_clock_killed = child.wall_clock_killed;
  if (child.wall_clock_killed) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.stopped_by_net = true;
    verdict.net = Net::wall_clock;
    verdict.detail = "wall clock exceeded " + json(limits.wall_clock_seconds).dump() +
                     "s; child killed (its process group)";
    return verdict;
  }
  if (!child.exited && child.signal == SIGXCPU) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.stopped_by_net = true;
    verdict.net = Net::cpu;
    verdict.detail = "CPU net: the child used up its RLIMIT_CPU of " +
                     std::to_string(cpu_seconds(limits)) + " s of CPU time (SIGXCPU)";
    return verdict;
  }
  const auto tail = last_object_with(child.stdout_tail, "outcome");
  std::optional<Outcome> claimed;
  if (tail && (*tail)["outcome"].is_string()) {
    claimed = outcome_from_name((*tail)["outcome"].get<std::string>());
  }
  if (child.exited && claimed && *claimed != Outcome::crashed &&
      exit_code_of(*claimed) == child.exit_code) {
    verdict.outcome = *claimed;
    if ((*tail)["detail"].is_string()) {
      verdict.detail = bounded_text((*tail)["detail"].get<std::string>(), kDetailBytes);
    }
    const auto count = [&](const char* key) -> std::optional<std::uint64_t> {
      const auto& value = (*tail)[key];
      if (value.is_number_unsigned()) return value.get<std::uint64_t>();
      return std::nullopt;
    };
    verdict.claimed_events = count("events_appended");
    verdict.claimed_failures = count("behavior_failures");
    if (verdict.outcome == Outcome::limits_exceeded) verdict.net = net_in(verdict.detail);
    return verdict;
  }
  verdict.outcome = Outcome::crashed;
  if (tail && child.exited) {
    const json& said = (*tail)["outcome"];
    append_line(verdict.detail,
                "the child's tail says \"" +
                    bounded_text(said.is_string() ? said.get<std::string>() : said.dump(), 64) +
                    "\" but it exited with code " + std::to_string(child.exit_code));
  } else if (child.exited) {
    // activegraph's parent takes the exit code when no tail came, but exit
    // 0 without a tail is crashed.
    if (child.exit_code != 0) verdict.outcome = outcome_of_exit_code(child.exit_code);
    append_line(verdict.detail,
                "child exited " + std::to_string(child.exit_code) + " with no report tail");
  } else {
    append_line(verdict.detail, "the child was killed by signal " + std::to_string(child.signal));
  }
  append_line(verdict.detail, stderr_detail(child));
  return verdict;
}

ExecutedTrial execute_activegraph_trial(std::span<const std::byte> segment,
                                        const TrialSpecification& spec, const store::RunId& fork_id,
                                        const ActivegraphInstall& install,
                                        const ChildOptions& options,
                                        const ParentRunContext& parent) {
  if (auto problems = check_trial_specification(spec); !problems.empty()) {
    std::string message = "the trial specification is invalid:";
    for (const auto& problem : problems) message += "\n  " + problem;
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification, message);
  }
  // The bytes trialed are the bytes pinned, whatever the child checks: a
  // pack whose directory does not hash to its pin never reaches it.
  for (const PackSource* pack : packs_in_load_order(spec)) {
    if (!pack->expected_bundle_hash) continue;
    auto verified = pack::verify_bundle_hash(pack->expected_bundle_hash->str(), pack->root_dir);
    if (verified) continue;
    ExecutedTrial refused;
    refused.executor = "activegraph";
    refused.executor_version = install.version;
    refused.verdict.outcome = Outcome::materialization_failed;
    refused.verdict.exit_code = exit_code_of(Outcome::materialization_failed);
    refused.verdict.detail = "the pack at " + pack->root_dir +
                             " is not the one pinned, so activegraph's child was not started: " +
                             verified.error().message;
    auto history =
        store::for_each_segment_event(segment, [](const store::EventView&) { return true; });
    refused.fork_seq = history ? *history : 0;
    return refused;
  }
  ScratchDir scratch(options.scratch_parent);
  // In a directory of its own: under strict isolation the child sees it
  // alone writable (SQLite writes its journal beside the store).
  const auto store_dir = scratch.path() / "store";
  std::filesystem::create_directory(store_dir);
  const auto store_path = store_dir / "activegraph.db";

  // The fork and its history, in activegraph's layout.
  UnixMillis tip = 0;
  std::uint64_t inherited_failures = 0;
  std::optional<Status> unreadable;
  const import::ScratchFork fork{fork_id,         spec.parent_run_id, spec.at_event,  spec.label,
                                 now_timestamp(), parent.goal,        parent.frame_id};
  auto written = import::write_scratch_store(store_path, fork, [&](const auto& visit) {
    auto read = store::for_each_segment_event(segment, [&](const store::EventView& event) {
      tip = parse_timestamp(event.timestamp).value_or(tip);
      if (event.type == "behavior.failed") ++inherited_failures;
      return visit(event);
    });
    if (!read) unreadable = read.error();
  });
  if (unreadable) {
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification,
                          "the fork's history segment cannot be read: " + unreadable->message);
  }
  if (!written) throw Error(written.error());
  const std::uint64_t fork_seq = *written;

  // The child, in a closed environment with activegraph on its path.
  std::chrono::milliseconds wall_clock{0};
  if (spec.limits.wall_clock_seconds > 0) {
    wall_clock = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(spec.limits.wall_clock_seconds * 1000.0)));
  }
  std::vector<std::string> env = closed_environment(spec.limits.env_passthrough, environ);
  env.insert(env.end(), options.extra_env.begin(), options.extra_env.end());
  SpawnRequest request = python_request(
      install, std::move(env), activegraph_job(store_path, fork_id, fork_seq, spec), wall_clock);
  request.cancellation = options.cancellation;
  // Under strict isolation forktrial's child confines itself (namespaces, a
  // read-only root, the filter widened for CPython), joins the trial's
  // cgroup, and execs activegraph's child in its place.
  ChildJob launcher;
  const StrictParent strict = prepare_strict(options, spec.limits, scratch.path(), launcher);
  ChildResult child;
  std::vector<std::string> launch_warnings;
  if (strict.active) {
    launcher.limits = spec.limits;
    launcher.spec = spec;
    launcher.scratch_store = store_dir.string();
    launcher.exec_argv = {request.program};
    launcher.exec_argv.insert(launcher.exec_argv.end(), request.args.begin(), request.args.end());
    launcher.exec_env = request.env;
    launcher.exec_stdin = request.stdin_data;
    launcher.exec_read_only = python_dirs(install);
    child = run_strict_child(child_request(options, launcher, wall_clock), strict);
    if (auto said = decode_tail(child.tail)) launch_warnings = said->warnings;
  } else {
    child = run_child(request);
  }

  ExecutedTrial executed;
  executed.executor = "activegraph";
  executed.executor_version = install.version;
  executed.fork_seq = fork_seq;
  executed.verdict = activegraph_verdict(child, spec.limits);
  // activegraph's tail counts the behavior failures of the fork's whole log;
  // a verdict's claim is of those after the fork point, as the store counts.
  if (auto& claimed = executed.verdict.claimed_failures;
      claimed && *claimed >= inherited_failures) {
    *claimed -= inherited_failures;
  }
  if (strict.active) {
    for (const auto& warning : launch_warnings) {
      append_line(executed.verdict.detail, "warning: " + warning);
    }
    executed.verdict.warnings.insert(executed.verdict.warnings.begin(), launch_warnings.begin(),
                                     launch_warnings.end());
    add_strict_findings(executed.verdict, child, strict, spec.limits);
  }

  // What the child appended, held to the rules every delta is held to; a
  // little past the write budget is read, so that the budget's rule sees it.
  const import::ScratchLimits bounds{spec.limits.max_appended_events + 2,
                                     spec.limits.max_appended_bytes + (std::uint64_t{1} << 20)};
  auto appended = import::read_scratch_appended(store_path, fork_id, fork_seq, bounds);
  std::string cut;
  bool over_budget = false;
  std::uint64_t accepted = 0;
  if (!appended) {
    cut = "the child's scratch store cannot be read (" + appended.error().message +
          "); nothing of its delta was recorded";
  } else {
    DeltaRules rules("the child", tip, spec.limits);
    for (const auto& event : appended->events) {
      if (rules.check(store::view_of(event))) break;
    }
    accepted = rules.accepted();
    if (const auto& rule_cut = rules.cut()) {
      cut = rule_cut->reason;
      over_budget = rule_cut->over_budget;
    } else if (appended->cut) {
      // Rows past what was read (more events, or more bytes, than the
      // budget and its margin, or one value longer than the whole budget):
      // the delta goes past its write budget after the events that fit.
      cut = "write budget: the child's delta goes past max_appended_events = " +
            std::to_string(spec.limits.max_appended_events) +
            " or max_appended_bytes = " + std::to_string(spec.limits.max_appended_bytes) +
            " after its " + std::to_string(accepted) +
            " events that fit; nothing past them was read";
      over_budget = true;
    }
    appended->events.resize(accepted);
    executed.events = std::move(appended->events);
  }
  TrialVerdict& verdict = executed.verdict;
  if (!cut.empty()) {
    if (!verdict.stopped_by_net) {
      verdict.outcome = over_budget ? Outcome::limits_exceeded : Outcome::crashed;
      verdict.net = over_budget ? Net::write_budget : Net::none;
    }
    append_line(verdict.detail, cut);
    verdict.claimed_events.reset();
    verdict.claimed_failures.reset();
  }
  return executed;
}

std::optional<Status> activegraph_preflight(const ActivegraphInstall& install,
                                            std::chrono::milliseconds timeout) {
  SpawnRequest request =
      python_request(install, closed_environment({}, environ), R"({"preflight": true})", timeout);
  ChildResult child;
  try {
    child = run_child(request);
  } catch (const Error& e) {
    return Status{ErrorCode::unavailable,
                  "cannot start activegraph's trial child: " + std::string(e.what())};
  }
  const auto answer = last_object_with(child.stdout_tail, "preflight");
  if (child.exited && child.exit_code == 0 && answer && (*answer)["preflight"] == "ok") {
    return std::nullopt;
  }
  std::string why = "activegraph's trial child did not answer the preflight (" +
                    (child.exited ? "exit " + std::to_string(child.exit_code)
                                  : "signal " + std::to_string(child.signal)) +
                    ")";
  append_line(why, stderr_detail(child));
  return Status{ErrorCode::unavailable, why};
}

}  // namespace forktrial::sandbox
