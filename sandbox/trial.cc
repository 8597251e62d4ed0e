#include "sandbox/trial.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <unordered_set>

#include "base/text.h"
#include "base/timestamp.h"
#include "base/unique_fd.h"
#include "pack/bundle_hash.h"
#include "pack/executor.h"
#include "runtime/runtime.h"
#include "sandbox/activegraph_child.h"
#include "sandbox/cgroup.h"
#include "sandbox/confine.h"
#include "sandbox/delta.h"
#include "sandbox/rlimits.h"
#include "sandbox/scratch.h"
#include "sandbox/spawn.h"
#include "sandbox/strict_parent.h"
#include "sandbox/syscall_filter.h"
#include "sandbox/tail.h"

extern char** environ;

namespace forktrial::sandbox {
namespace {

constexpr std::size_t kStderrInDetail = 2048;
constexpr std::size_t kOutputLinesInDetail = 20;
constexpr std::size_t kOutputBytesInDetail = 2048;

std::string last_bytes(const std::string& text, std::size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

std::string invalid_message(std::string head, const std::vector<std::string>& problems) {
  for (const auto& problem : problems) head += "\n  " + problem;
  return head;
}

std::string signal_text(int signal) {
  const char* name = ::sigabbrev_np(signal);
  return std::string("SIG") + (name != nullptr ? name : std::to_string(signal));
}

void append_line(std::string& detail, const std::string& line) {
  append_detail_line(detail, line);
}

// What the parent accepts of the child's delta: the events it may record,
// which are a prefix of what the child appended to its scratch store.
struct DeltaScan {
  std::uint64_t events = 0;  // leading events accepted
  std::string cut;           // why the events after them were refused ("" when none were)
  bool over_budget = false;  // the cut is the write budget's
};

// Reads the child's delta in the scratch store one event at a time (never
// holding it whole) and decides how much of it the parent records: the
// events before the first that breaks the delta rules (sandbox/delta.h).
DeltaScan scan_delta(const store::Snapshot& scratch, const store::RunInfo& fork,
                     std::uint64_t fork_seq, UnixMillis tip, const TrialLimits& limits) {
  DeltaRules rules("the child", tip, limits);
  scratch.for_each_event(fork, fork_seq + 1,
                         [&](const store::EventView& view) { return !rules.check(view); });
  DeltaScan scan;
  scan.events = rules.accepted();
  if (const auto& cut = rules.cut()) {
    scan.cut = cut->reason;
    scan.over_budget = cut->over_budget;
  }
  return scan;
}

}  // namespace

StrictParent prepare_strict(const ChildOptions& options, const TrialLimits& limits,
                            const std::filesystem::path& scratch_dir, ChildJob& job) {
  StrictParent strict;
  if (options.isolation != Isolation::strict) return strict;
  strict.active = true;
  job.strict = true;
  const auto root = scratch_dir / "root";
  std::filesystem::create_directory(root);
  job.strict_root = root.string();
  std::optional<std::uint64_t> memory;
  if (limits.max_rss_bytes && *limits.max_rss_bytes > 0) memory = *limits.max_rss_bytes;
  auto cgroup = TrialCgroup::create(memory, kStrictMaxTasks);
  if (cgroup) {
    strict.cgroup.emplace(std::move(*cgroup));
  } else {
    strict.warnings.push_back("cgroup net unavailable: " + cgroup.error().message +
                              "; the trial's real memory and task count are not capped "
                              "(RLIMIT_AS, and the seccomp filter's refusal of new processes, "
                              "still apply)");
  }
  return strict;
}

ChildResult run_strict_child(SpawnRequest request, const StrictParent& strict) {
  if (strict.active) {
    request.strict.emplace();
    if (strict.cgroup) {
      for (const auto& fd : strict.cgroup->procs())
        request.strict->cgroup_procs.push_back(fd.get());
    }
  }
  ChildResult child = run_child(request);
  if (child.in_namespaces && child.exited && child.exit_code > kSignalExitBase &&
      child.exit_code < kSignalExitBase + NSIG) {
    child.exited = false;
    child.signal = child.exit_code - kSignalExitBase;
    child.exit_code = -1;
  }
  child.warnings.insert(child.warnings.end(), strict.warnings.begin(), strict.warnings.end());
  return child;
}

void add_strict_findings(TrialVerdict& verdict, const ChildResult& child,
                         const StrictParent& strict, const TrialLimits& limits) {
  if (!strict.active) return;
  const auto events = strict.cgroup ? strict.cgroup->events() : TrialCgroup::Events{};
  std::string stopped;
  Net net = Net::none;  // the task limit is no Net of its own
  if (events.oom_kills > 0) {
    net = Net::memory;
    stopped = "memory net: the trial's cgroup reached its memory limit of " +
              std::to_string(limits.max_rss_bytes.value_or(0)) +
              " bytes (max_rss_bytes, real memory) and the kernel's OOM killer killed " +
              std::to_string(events.oom_kills) + " of its tasks";
  } else if (events.tasks_refused > 0) {
    stopped = "pids net: the trial tried to hold more than " + std::to_string(kStrictMaxTasks) +
              " tasks at once; its cgroup's pids limit refused " +
              std::to_string(events.tasks_refused) + " forks or threads";
  }
  if (!stopped.empty() && !verdict.wall_clock_killed) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.stopped_by_net = true;
    verdict.net = net;
    verdict.detail = stopped + (verdict.detail.empty() ? "" : "\n" + verdict.detail);
  }
  if (!child.exited && child.signal == SIGSYS && !verdict.wall_clock_killed) {
    const auto number = refused_syscall(child.stderr_tail);
    verdict.outcome = Outcome::crashed;
    verdict.net = Net::none;
    verdict.detail = "strict filter: " +
                     (number ? "system call " + syscall_name(*number) + " refused"
                             : std::string("a system call was refused")) +
                     "; the child was killed by SIGSYS\n" + verdict.detail;
  }
  for (const auto& warning : child.warnings) append_line(verdict.detail, "warning: " + warning);
  verdict.warnings.insert(verdict.warnings.begin(), child.warnings.begin(), child.warnings.end());
}

SpawnRequest child_request(const ChildOptions& options, const ChildJob& job,
                           std::chrono::milliseconds wall_clock) {
  SpawnRequest request;
  request.program =
      (options.child_path.empty() ? default_child_path() : options.child_path).string();
  request.env = closed_environment(job.limits.env_passthrough, environ);
  request.env.insert(request.env.end(), options.extra_env.begin(), options.extra_env.end());
  ChildJob with_parent = job;
  with_parent.parent_pid = ::getpid();
  request.stdin_data = encode_job(with_parent);
  request.wall_clock = wall_clock;
  request.cancellation = options.cancellation;
  return request;
}

namespace {

// The last `max_lines` lines within the last `max_bytes` of `text` (a line
// cut by the byte limit is dropped, unless it is the only one).
std::string last_lines(std::string_view text, std::size_t max_lines, std::size_t max_bytes) {
  if (text.ends_with('\n')) text.remove_suffix(1);
  if (text.size() > max_bytes) {
    text = text.substr(text.size() - max_bytes);
    const std::size_t newline = text.find('\n');
    if (newline == std::string_view::npos) return "..." + std::string(text);
    text.remove_prefix(newline + 1);
  }
  std::size_t cut = text.size();
  for (std::size_t lines = 0; lines < max_lines; ++lines) {
    const std::size_t newline = cut == 0 ? std::string_view::npos : text.rfind('\n', cut - 1);
    if (newline == std::string_view::npos) return std::string(text);
    cut = newline;
  }
  return std::string(text.substr(cut + 1));
}

// The child's two streams, labelled: its own diagnostics go to stderr, the
// candidate's output (one "[origin] text" line per print or ctx.log) to
// stdout, so a candidate cannot pose as the child.
std::string child_problem_detail(const ChildResult& child) {
  std::string detail;
  if (!child.stderr_tail.empty()) {
    detail = "child diagnostics (stderr, last bytes):\n" +
             sanitize_utf8(last_bytes(child.stderr_tail, kStderrInDetail));
  }
  if (const std::string output =
          last_lines(child.stdout_tail, kOutputLinesInDetail, kOutputBytesInDetail);
      !output.empty()) {
    append_line(detail, "candidate output (stdout, last lines):\n" + sanitize_utf8(output));
  }
  return detail;
}

}  // namespace

std::filesystem::path default_child_path() {
  if (const char* chosen = ::getenv("FORKTRIAL_CHILD"); chosen != nullptr && *chosen != '\0') {
    return chosen;
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "forktrial-child";
  const auto dir = self.parent_path();
  for (const auto& candidate :
       {dir / "forktrial-child", dir.parent_path() / "libexec" / "forktrial" / "forktrial-child"}) {
    if (std::filesystem::exists(candidate, ec)) return candidate;
  }
  return dir / "forktrial-child";
}

TrialLimits default_preflight_limits() {
  TrialLimits limits;
  limits.max_rss_bytes = std::uint64_t{256} << 20;
  return limits;
}

namespace {

// How the child ended, decided from what the parent saw of it: the nets
// first (the wall clock, the CPU), then a delta the parent cut, then the
// child's own tail when its exit code agrees with it; anything else crashed.
TrialVerdict decide_verdict(const ChildResult& child, const DeltaScan& scan,
                            const TrialLimits& limits) {
  TrialVerdict verdict;
  std::optional<ChildTail> tail;
  std::string tail_problem;
  if (auto decoded = decode_tail(child.tail)) {
    tail = *decoded;
  } else {
    tail_problem = decoded.error().message;
  }
  if (child.tail_overflow) tail_problem = "the child wrote more than the tail allows on fd 3";

  verdict.exit_code = child.exited ? child.exit_code : -child.signal;
  verdict.wall_clock_killed = child.wall_clock_killed;
  if (child.wall_clock_killed) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.stopped_by_net = true;
    verdict.net = Net::wall_clock;
    append_line(verdict.detail,
                "wall clock exhausted: the child ran past wall_clock_seconds = " +
                    nlohmann::json(limits.wall_clock_seconds).dump() +
                    " and its process group was killed; trial.wall_clock_exhausted is in the fork");
  } else if (!child.exited && child.signal == SIGXCPU) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.stopped_by_net = true;
    verdict.net = Net::cpu;
    append_line(verdict.detail, "CPU net: the child used up its RLIMIT_CPU of " +
                                    std::to_string(cpu_seconds_for(limits)) +
                                    " s of CPU time (SIGXCPU)");
  } else if (!scan.cut.empty() && !scan.over_budget) {
    verdict.outcome = Outcome::crashed;
  } else if (scan.over_budget) {
    verdict.outcome = Outcome::limits_exceeded;
    verdict.net = Net::write_budget;
  } else if (child.exited && outcome_of_exit_code(child.exit_code) != Outcome::crashed && tail &&
             exit_code_of(tail->outcome) == child.exit_code) {
    verdict.outcome = tail->outcome;
    if (tail->outcome == Outcome::limits_exceeded) verdict.net = tail->net;
    append_line(verdict.detail, tail->detail);
    verdict.warnings = tail->warnings;
  } else {
    verdict.outcome = Outcome::crashed;
    if (child.exited) {
      append_line(verdict.detail,
                  "the child exited with unexpected code " + std::to_string(child.exit_code));
    } else {
      append_line(verdict.detail, "the child was killed by signal " + std::to_string(child.signal) +
                                      " (" + signal_text(child.signal) + ")");
    }
    if (!tail_problem.empty()) append_line(verdict.detail, tail_problem);
    append_line(verdict.detail, child_problem_detail(child));
  }
  append_line(verdict.detail, scan.cut);
  if (tail && scan.cut.empty()) {
    verdict.claimed_events = tail->events_appended;
    verdict.claimed_failures = tail->behavior_failures;
  }
  return verdict;
}

// The parent's handle on a scratch store: opened once, to seed it, kept
// open while the child writes it (the parent has no transaction open then),
// and read back through it. Exclusive (no lock file): the parent never reads
// or writes the lock file the child used, so nothing the child left there
// can stall or mislead it.
store::StoreOptions parent_scratch_options() {
  store::StoreOptions options = scratch_store_options();
  options.exclusive = true;
  return options;
}

// The scratch directory of one trial: leased from the pool the options name
// (standard isolation), else made for the trial alone. Its store directory
// is empty. Declared before the scratch store opened in it, so that the
// store is closed before the directory is reset or removed.
class TrialScratch {
 public:
  explicit TrialScratch(const ChildOptions& options) {
    if (options.scratch_pool != nullptr && options.isolation == Isolation::standard) {
      leased_.emplace(options.scratch_pool->lease());
    } else {
      own_.emplace(options.scratch_parent);
    }
  }
  std::filesystem::path store_path() const {
    return leased_ ? leased_->store_path() : own_->path() / "store";
  }

 private:
  std::optional<ScratchPool::Lease> leased_;
  std::optional<ScratchDir> own_;
};

// A child run against a scratch store that holds the fork (run `fork_id`,
// its history up to `fork_seq` stamped up to `tip`): the child's result, the
// scratch store as untrusted input (empty when it cannot be read), what of
// its delta the parent accepts, and the verdict.
struct ScratchRun {
  store::EventStore* scratch = nullptr;
  std::optional<store::RunInfo> fork;
  DeltaScan scan;
  TrialVerdict verdict;
};

ScratchRun run_on_scratch(store::EventStore& scratch_store, const TrialSpecification& spec,
                          const store::RunId& fork_id, std::uint64_t fork_seq, UnixMillis tip,
                          const ChildOptions& options) {
  ChildJob job;
  job.limits = spec.limits;
  job.spec = spec;
  job.fork_run_id = fork_id.str();
  job.fork_seq = fork_seq;
  job.scratch_store = scratch_store.path().string();
  job.trial_id = fork_id.str();
  const StrictParent strict =
      prepare_strict(options, spec.limits, scratch_store.path().parent_path(), job);

  // A fresh child process, closed environment, job on stdin, tail on fd 3.
  std::chrono::milliseconds wall_clock{0};
  if (spec.limits.wall_clock_seconds > 0) {
    wall_clock = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(spec.limits.wall_clock_seconds * 1000.0)));
  }
  const ChildResult child = run_strict_child(child_request(options, job, wall_clock), strict);

  // The child wrote the scratch store, so it is read as untrusted: what
  // cannot be read is cut.
  ScratchRun run;
  try {
    auto snapshot = scratch_store.snapshot();
    run.scratch = &scratch_store;
    run.fork = snapshot.run(fork_id);
    if (run.fork) run.scan = scan_delta(snapshot, *run.fork, fork_seq, tip, spec.limits);
  } catch (const std::exception& e) {
    run.scratch = nullptr;
    run.fork.reset();
    run.scan = DeltaScan{};
    run.scan.cut = std::string("the child's scratch store cannot be read (") + e.what() +
                   "); nothing of its delta was recorded";
  }
  run.verdict = decide_verdict(child, run.scan, spec.limits);
  add_strict_findings(run.verdict, child, strict, spec.limits);
  return run;
}

// Every problem of the specification, and of its limits for the executor
// that will run its candidate.
void require_valid(const TrialSpecification& spec) {
  auto problems = check_trial_specification(spec);
  if (!pack::is_activegraph_pack(spec.candidate.root_dir)) {
    if (auto bad = lua_limits_problem(spec.limits)) problems.push_back(*bad);
  }
  if (!problems.empty()) {
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification,
                          invalid_message("the trial specification is invalid:", problems));
  }
}

}  // namespace

namespace {

bool runs_on_activegraph(const TrialSpecification& spec) {
  return pack::is_activegraph_pack(spec.candidate.root_dir);
}

// Records the fork with `accepted` events of `delta` in one transaction.
// When the store refuses what the parent accepted (a child that corrupted
// its scratch store can produce that), the fork is recorded without its
// delta and `verdict` says why. Throws StoreError when even that is refused.
void record_or_without_delta(store::EventStore& store, const TrialSpecification& spec,
                             const store::NewRun& fork_record, std::uint64_t accepted,
                             const DeltaSource& delta, TrialVerdict& verdict) {
  auto record = [&](std::uint64_t events) {
    return store.write([&](store::Writer& writer) {
      return record_trial(writer, spec, fork_record, events, delta, verdict);
    });
  };
  auto recorded = record(accepted);
  if (!recorded && accepted > 0) {
    verdict = without_delta(verdict, recorded.error().message);
    recorded = record(0);
  }
  if (!recorded) {
    throw store::StoreError("cannot record trial " + fork_record.id->str() +
                            " in the store: " + recorded.error().message);
  }
}

// An activegraph pack's trial on this machine: the fork's segment through
// activegraph's child, then recorded here as a worker's result is.
TrialReport run_activegraph_trial(store::EventStore& store, const TrialSpecification& spec,
                                  std::uint64_t fork_seq, const ChildOptions& options) {
  const ActivegraphInstall install = activegraph_install(options);
  std::vector<std::byte> segment;
  ParentRunContext context;
  {
    auto snapshot = store.snapshot();
    const auto parent = snapshot.run(spec.parent_run_id);
    segment = snapshot.segment(*parent, fork_seq);
    context = ParentRunContext{parent->goal, parent->frame_id};
  }
  const store::RunId fork_id = store::trial_fork_id(store.new_run_id());
  ExecutedTrial executed =
      execute_activegraph_trial(segment, spec, fork_id, install, options, context);
  record_or_without_delta(store, spec, store::NewRun{.id = fork_id, .label = spec.label},
                          executed.events.size(), delta_of(executed.events), executed.verdict);
  TrialReport report = report_from_store(store.snapshot(), fork_id, fork_seq, executed.verdict);
  report.isolation =
      trial_isolation(options.isolation, spec.limits, report.warnings, executed.executor);
  report.executor = executed.executor;
  report.executor_version = executed.executor_version;
  return report;
}

}  // namespace

TrialReport run_trial(store::EventStore& store, const TrialSpecification& spec,
                      const ChildOptions& options) {
  // 0. What the caller got wrong is refused before anything is forked,
  // spawned or recorded: every problem at once.
  require_valid(spec);
  const store::RunId& parent_run_id = spec.parent_run_id;
  const store::EventId& at_event = spec.at_event;

  // 1. The parent forks. The fork point is resolved and checked here; the
  // fork's record is written together with its result (step 4), so a trial
  // is in the store whole or not at all and costs one durable commit.
  std::uint64_t fork_seq = 0;
  UnixMillis tip = 0;
  {
    auto snapshot = store.snapshot();
    auto parent = snapshot.run(parent_run_id);
    if (!parent) {
      throw TrialSetupError(TrialSetupError::Kind::unknown_run,
                            "no run " + parent_run_id.str() + " in the store");
    }
    auto point = snapshot.find_event(*parent, at_event);
    if (!point) {
      throw TrialSetupError(TrialSetupError::Kind::unknown_event,
                            "no event " + at_event.str() + " in the history of run " +
                                parent_run_id.str() + "; fork at one of its events");
    }
    fork_seq = point->seq;
    tip = parse_timestamp(point->timestamp).value_or(0);
  }
  if (runs_on_activegraph(spec)) return run_activegraph_trial(store, spec, fork_seq, options);
  const store::RunId fork_id = store::trial_fork_id(store.new_run_id());
  const store::NewRun fork_record{.id = fork_id, .label = spec.label};

  // 2. A scratch store holding only the fork, seeded from its segment.
  const TrialScratch scratch(options);
  store::EventStore scratch_store(scratch.store_path(), parent_scratch_options());
  {
    std::vector<std::byte> segment;
    {
      auto snapshot = store.snapshot();
      segment = snapshot.segment(*snapshot.run(parent_run_id), fork_seq);
    }
    auto loaded = scratch_store.load_segment(segment, fork_record);
    if (!loaded) {
      throw store::StoreError("cannot seed the scratch store: " + loaded.error().message);
    }
  }

  // 3. The child, and what the parent makes of it.
  ScratchRun run = run_on_scratch(scratch_store, spec, fork_id, fork_seq, tip, options);

  // 4. One transaction: the fork's lineage, the part of the child's delta
  // the parent accepts (streamed from the scratch store, never held whole),
  // and the parent's record of a wall-clock kill.
  const DeltaSource delta = [&](const EventVisitor& visit) {
    auto snapshot = run.scratch->snapshot();
    snapshot.for_each_event(*run.fork, fork_seq + 1, visit);
  };
  record_or_without_delta(store, spec, fork_record, run.scan.events, delta, run.verdict);

  // 5. The store is the record: counts come from it.
  TrialReport report = report_from_store(store.snapshot(), fork_id, fork_seq, run.verdict);
  report.isolation = trial_isolation(options.isolation, spec.limits, report.warnings);
  return report;
}

ExecutedTrial execute_trial(std::span<const std::byte> segment, const TrialSpecification& spec,
                            const store::RunId& fork_id, const ChildOptions& options,
                            const ParentRunContext& parent) {
  require_valid(spec);
  if (runs_on_activegraph(spec)) {
    return execute_activegraph_trial(segment, spec, fork_id, activegraph_install(options), options,
                                     parent);
  }
  const TrialScratch scratch(options);
  store::EventStore scratch_store(scratch.store_path(), parent_scratch_options());
  std::uint64_t fork_seq = 0;
  UnixMillis tip = 0;
  {
    auto loaded =
        scratch_store.load_segment(segment, store::NewRun{.id = fork_id, .label = spec.label});
    if (!loaded) {
      throw TrialSetupError(
          TrialSetupError::Kind::invalid_specification,
          "the fork's history segment cannot be loaded: " + loaded.error().message);
    }
    fork_seq = loaded->head;
    auto snapshot = scratch_store.snapshot();
    const auto history = snapshot.history(*loaded, fork_seq == 0 ? 1 : fork_seq);
    if (!history.empty()) tip = parse_timestamp(history.back().timestamp).value_or(0);
  }

  ScratchRun run = run_on_scratch(scratch_store, spec, fork_id, fork_seq, tip, options);
  ExecutedTrial executed;
  executed.fork_seq = fork_seq;
  executed.verdict = run.verdict;
  if (run.scan.events > 0) {
    auto snapshot = run.scratch->snapshot();
    executed.events.reserve(run.scan.events);
    snapshot.for_each_event(*run.fork, fork_seq + 1, [&](const store::EventView& view) {
      executed.events.push_back(static_cast<store::NewEvent>(view.to_event()));
      return executed.events.size() < run.scan.events;
    });
  }
  return executed;
}

std::vector<std::string> preflight(const TrialLimits& limits, std::chrono::milliseconds timeout,
                                   const ChildOptions& options) {
  auto problems = check_trial_limits(limits);
  if (auto bad = lua_limits_problem(limits)) problems.push_back(*bad);
  if (!problems.empty()) {
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification,
                          invalid_message("the limits to probe are invalid:", problems));
  }
  ChildJob job;
  job.preflight = true;
  job.limits = limits;
  std::optional<ScratchDir> scratch;
  if (options.isolation == Isolation::strict) scratch.emplace(options.scratch_parent);
  const StrictParent strict =
      prepare_strict(options, limits, scratch ? scratch->path() : std::filesystem::path(), job);
  ChildResult child;
  try {
    child = run_strict_child(child_request(options, job, timeout), strict);
  } catch (const SystemError& e) {
    throw SandboxStartupError(std::string("a trial child cannot start: ") + e.what());
  }
  auto tail = decode_tail(child.tail);
  if (!child.exited || child.exit_code != 0 || !tail) {
    std::string how = child.wall_clock_killed
                          ? "did not finish within " + std::to_string(timeout.count()) + " ms"
                      : child.exited ? "exited with code " + std::to_string(child.exit_code)
                                     : "was killed by " + signal_text(child.signal);
    throw SandboxStartupError(
        "a trial child cannot start under the sandbox environment: it " + how + "; stderr: " +
        (child.stderr_tail.empty() ? std::string("(empty)")
                                   : last_bytes(child.stderr_tail, kStderrInDetail)));
  }
  std::vector<std::string> warnings = child.warnings;
  warnings.insert(warnings.end(), tail->warnings.begin(), tail->warnings.end());
  return warnings;
}

}  // namespace forktrial::sandbox
