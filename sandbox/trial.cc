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
#include "runtime/reserved_names.h"
#include "runtime/runtime.h"
#include "sandbox/rlimits.h"
#include "sandbox/scratch.h"
#include "sandbox/spawn.h"
#include "sandbox/tail.h"

extern char** environ;

namespace forktrial::sandbox {
namespace {

constexpr std::size_t kStderrInDetail = 2048;
constexpr std::size_t kOutputLinesInDetail = 20;
constexpr std::size_t kOutputBytesInDetail = 2048;
// The event the runtime records for each error of a behavior (runtime/runtime.cc).
constexpr std::string_view kBehaviorFailed = "behavior.failed";

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
  if (line.empty()) return;
  if (!detail.empty()) detail += "\n";
  detail += line;
}

// What the parent accepts of the child's delta: the events it may record,
// which are a prefix of what the child appended to its scratch store.
struct DeltaScan {
  std::uint64_t events = 0;    // leading events accepted
  std::string last_timestamp;  // of the last accepted event ("" when none)
  std::string cut;             // why the events after them were refused ("" when none were)
  bool over_budget = false;    // the cut is the write budget's
};

// Parent-reserved records: the parent alone writes `trial.*` events (the
// wall-clock kill), as actor forktrial.parent. A child's delta holding one
// is forged, whatever produced it.
bool is_parent_record(const store::EventView& event) {
  return runtime::is_parent_type(event.type) || runtime::is_forktrial_type(event.type) ||
         (event.actor && runtime::is_forktrial_actor(*event.actor));
}

// Reads the child's delta in the scratch store one event at a time (never
// holding it whole) and decides how much of it the parent records: every
// event the authoritative store would take, up to the write budget (plus
// the one closing record the runtime writes when the budget runs out), and
// nothing after a forged parent record.
DeltaScan scan_delta(const store::Snapshot& scratch, const store::RunInfo& fork,
                     std::uint64_t fork_seq, const TrialLimits& limits) {
  DeltaScan scan;
  std::uint64_t bytes = 0;
  const std::uint64_t max_events = limits.max_appended_events == 0
                                       ? std::numeric_limits<std::uint64_t>::max()
                                       : limits.max_appended_events + runtime::kClosingRecords;
  const std::uint64_t max_bytes = limits.max_appended_bytes == 0
                                      ? std::numeric_limits<std::uint64_t>::max()
                                      : limits.max_appended_bytes + runtime::kClosingRecordBytes;
  scratch.for_each_event(fork, fork_seq + 1, [&](const store::EventView& view) {
    const store::Event event = view.to_event();
    const std::string which =
        "event " + event.id.str() + " (seq " + std::to_string(event.seq) + ")";
    if (is_parent_record(view)) {
      scan.cut = "the child's " + which + " poses as a parent record (type \"" + event.type +
                 "\", actor \"" + event.actor.value_or("") +
                 "\"); only the parent writes those. Nothing from it on was recorded";
      return false;
    }
    if (auto problem = store::event_problem(event)) {
      scan.cut = "the store refuses the child's " + which + ": " + *problem +
                 ". Nothing from it on was recorded";
      return false;
    }
    bytes += store::event_text_bytes(event);
    if (scan.events + 1 > max_events || bytes > max_bytes) {
      scan.over_budget = true;
      scan.cut = "write budget: the child's delta goes past max_appended_events = " +
                 std::to_string(limits.max_appended_events) +
                 " or max_appended_bytes = " + std::to_string(limits.max_appended_bytes) + " at " +
                 which + "; the parent recorded the " + std::to_string(scan.events) +
                 " events before it";
      return false;
    }
    ++scan.events;
    scan.last_timestamp = event.timestamp;
    return true;
  });
  return scan;
}

// Appends the first `count` events of the child's delta to the fork, in
// batches, never holding the delta whole. Returns the fork's new head.
store::Result<std::uint64_t> copy_delta(store::Writer& writer, const store::RunId& fork_id,
                                        std::uint64_t head, const store::Snapshot& scratch,
                                        const store::RunInfo& scratch_fork, std::uint64_t fork_seq,
                                        std::uint64_t count) {
  constexpr std::size_t kBatchEvents = 512;
  constexpr std::size_t kBatchBytes = std::size_t{4} << 20;
  std::vector<store::NewEvent> batch;
  std::size_t batch_bytes = 0;
  std::uint64_t copied = 0;
  std::optional<store::Refusal> refused;
  auto flush = [&] {
    if (batch.empty() || refused) return;
    auto appended = writer.append(fork_id, head, batch);
    if (!appended) {
      refused = appended.error();
    } else {
      head = *appended;
    }
    batch.clear();
    batch_bytes = 0;
  };
  if (count > 0) {
    scratch.for_each_event(scratch_fork, fork_seq + 1, [&](const store::EventView& view) {
      store::Event event = view.to_event();
      batch_bytes += store::event_text_bytes(event);
      batch.push_back(std::move(event));
      ++copied;
      if (batch.size() >= kBatchEvents || batch_bytes >= kBatchBytes) flush();
      return copied < count && !refused;
    });
    flush();
  }
  if (refused) return std::unexpected(*refused);
  return head;
}

// The event the parent records when its wall-clock kill stopped the child:
// one millisecond after the last event in the fork, with the next id not
// taken in the fork's history (the parent's prefix and the recorded delta).
store::NewEvent wall_clock_event(const store::Writer& writer, const store::RunInfo& fork,
                                 const std::string& last_timestamp, double limit_seconds) {
  UnixMillis last = parse_timestamp(last_timestamp).value_or(0);
  store::NewEvent event;
  for (std::uint64_t n = fork.head + 1;; ++n) {
    event.id = store::numbered_event_id(n);
    if (!writer.find_event(fork, event.id)) break;
  }
  event.type = "trial.wall_clock_exhausted";
  event.payload = nlohmann::json{
      {"wall_clock_seconds", limit_seconds},
      {"last_accepted_seq",
       fork.head}}.dump();
  event.timestamp = format_timestamp(last + 1);
  event.actor = "forktrial.parent";
  return event;
}

// How every trial child is started: the closed environment, the job on stdin.
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

TrialReport run_trial(store::EventStore& store, const TrialSpecification& spec,
                      const ChildOptions& options) {
  // 0. What the caller got wrong is refused before anything is forked,
  // spawned or recorded: every problem at once.
  if (auto problems = check_trial_specification(spec); !problems.empty()) {
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification,
                          invalid_message("the trial specification is invalid:", problems));
  }
  const store::RunId& parent_run_id = spec.parent_run_id;
  const store::EventId& at_event = spec.at_event;
  const TrialLimits& limits = spec.limits;

  // 1. The parent forks. The fork point is resolved and checked here; the
  // fork's record is written together with its result (step 4), so a trial
  // is in the store whole or not at all and costs one durable commit.
  std::uint64_t fork_seq = 0;
  std::string tip_timestamp;
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
    tip_timestamp = point->timestamp;
  }
  const store::RunId fork_id = store.new_run_id();
  const store::NewRun fork_record{.id = fork_id, .label = spec.label};

  TrialReport report;
  report.fork_run_id = fork_id.str();

  // 2. A scratch store holding only the fork, seeded from its segment.
  ScratchDir scratch(options.scratch_parent);
  const auto scratch_store = scratch.path() / "store";
  {
    store::EventStore seed(scratch_store, scratch_store_options());
    auto snapshot = store.snapshot();
    auto loaded =
        seed.load_segment(snapshot.segment(*snapshot.run(parent_run_id), fork_seq), fork_record);
    if (!loaded) {
      throw store::StoreError("cannot seed the scratch store: " + loaded.error().message);
    }
  }

  ChildJob job;
  job.limits = limits;
  job.spec = spec;
  job.fork_run_id = fork_id.str();
  job.fork_seq = fork_seq;
  job.scratch_store = scratch_store.string();
  job.trial_id = fork_id.str();

  // 3. A fresh child process, closed environment, job on stdin, tail on fd 3.
  std::chrono::milliseconds wall_clock{0};
  if (limits.wall_clock_seconds > 0) {
    wall_clock = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(limits.wall_clock_seconds * 1000.0)));
  }
  const ChildResult child = run_child(child_request(options, job, wall_clock));

  // 4. One transaction: the fork's lineage, the part of the child's delta
  // the parent accepts (streamed from the scratch store, never held whole),
  // and the parent's record of a wall-clock kill. The child wrote the
  // scratch store, so it is read as untrusted: what cannot be read is cut.
  std::optional<store::EventStore> scratch_reader;
  DeltaScan scan;
  try {
    scratch_reader.emplace(scratch_store, scratch_store_options());
    auto snapshot = scratch_reader->snapshot();
    if (auto run = snapshot.run(fork_id)) scan = scan_delta(snapshot, *run, fork_seq, limits);
  } catch (const std::exception& e) {
    scan = DeltaScan{};
    scan.cut = std::string("the child's scratch store cannot be read (") + e.what() +
               "); nothing of its delta was recorded";
  }
  auto record = [&](std::uint64_t accepted) {
    return store.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
      auto fork = writer.fork(parent_run_id, at_event, fork_record);
      if (!fork) return std::unexpected(fork.error());
      std::uint64_t head = fork->head;
      if (accepted > 0) {
        auto snapshot = scratch_reader->snapshot();
        auto appended =
            copy_delta(writer, fork_id, head, snapshot, *snapshot.run(fork_id), fork_seq, accepted);
        if (!appended) return appended;
        head = *appended;
      }
      if (child.wall_clock_killed) {
        const std::string& last = accepted > 0 ? scan.last_timestamp : tip_timestamp;
        auto event =
            wall_clock_event(writer, *writer.run(fork_id), last, limits.wall_clock_seconds);
        auto appended = writer.append(fork_id, head, std::span(&event, 1));
        if (!appended) return appended;
        head = *appended;
      }
      return head;
    });
  };
  auto recorded = record(scan.events);
  if (!recorded && scan.events > 0) {
    // The store refused what the scan accepted (a child that corrupted its
    // scratch store can produce that): record the fork without the delta.
    scan.cut = "the store refused the child's delta (" + recorded.error().message +
               "); nothing of it was recorded";
    scan.events = 0;
    recorded = record(0);
  }
  if (!recorded) {
    throw store::StoreError("cannot record trial " + fork_id.str() +
                            " in the store: " + recorded.error().message);
  }

  // 5. The store is the record: counts come from it.
  {
    auto snapshot = store.snapshot();
    auto current = snapshot.run(fork_id);
    report.events_appended = snapshot.count(*current) - fork_seq;
    // activegraph counts the fork's whole log (the inherited prefix too);
    // the trial's own share is reported beside it.
    report.behavior_failures = snapshot.events_of_type(*current, kBehaviorFailed).size();
    report.behavior_failures_after_fork =
        snapshot.events_of_type(*current, kBehaviorFailed, fork_seq).size();
  }

  std::optional<ChildTail> tail;
  std::string tail_problem;
  if (auto decoded = decode_tail(child.tail)) {
    tail = *decoded;
  } else {
    tail_problem = decoded.error();
  }
  if (child.tail_overflow) tail_problem = "the child wrote more than the tail allows on fd 3";

  report.exit_code = child.exited ? child.exit_code : -child.signal;
  if (child.wall_clock_killed) {
    report.outcome = Outcome::limits_exceeded;
    append_line(report.detail,
                "wall clock exhausted: the child ran past wall_clock_seconds = " +
                    nlohmann::json(limits.wall_clock_seconds).dump() +
                    " and its process group was killed; trial.wall_clock_exhausted is in the fork");
  } else if (!child.exited && child.signal == SIGXCPU) {
    report.outcome = Outcome::limits_exceeded;
    append_line(report.detail, "CPU net: the child used up its RLIMIT_CPU of " +
                                   std::to_string(cpu_seconds_for(limits)) +
                                   " s of CPU time (SIGXCPU)");
  } else if (!scan.cut.empty() && !scan.over_budget) {
    report.outcome = Outcome::crashed;
  } else if (scan.over_budget) {
    report.outcome = Outcome::limits_exceeded;
  } else if (child.exited && outcome_of_exit_code(child.exit_code) != Outcome::crashed && tail &&
             exit_code_of(tail->outcome) == child.exit_code) {
    report.outcome = tail->outcome;
    append_line(report.detail, tail->detail);
    report.warnings = tail->warnings;
  } else {
    report.outcome = Outcome::crashed;
    if (child.exited) {
      append_line(report.detail,
                  "the child exited with unexpected code " + std::to_string(child.exit_code));
    } else {
      append_line(report.detail, "the child was killed by signal " + std::to_string(child.signal) +
                                     " (" + signal_text(child.signal) + ")");
    }
    if (!tail_problem.empty()) append_line(report.detail, tail_problem);
    append_line(report.detail, child_problem_detail(child));
  }
  append_line(report.detail, scan.cut);

  // The tail is a signal only: say when it disagrees with the store.
  if (tail && scan.cut.empty()) {
    const std::uint64_t parent_events = child.wall_clock_killed ? 1 : 0;
    const std::uint64_t stored_child_events = report.events_appended - parent_events;
    if (tail->events_appended != stored_child_events ||
        tail->behavior_failures != report.behavior_failures_after_fork) {
      append_line(report.detail,
                  "the child's tail claimed " + std::to_string(tail->events_appended) +
                      " events appended and " + std::to_string(tail->behavior_failures) +
                      " behavior failures after the fork point, but the store holds " +
                      std::to_string(stored_child_events) + " and " +
                      std::to_string(report.behavior_failures_after_fork) +
                      "; the store's numbers are reported");
    }
  }
  return report;
}

std::vector<std::string> preflight(const TrialLimits& limits, std::chrono::milliseconds timeout,
                                   const ChildOptions& options) {
  if (auto problems = check_trial_limits(limits); !problems.empty()) {
    throw TrialSetupError(TrialSetupError::Kind::invalid_specification,
                          invalid_message("the limits to probe are invalid:", problems));
  }
  ChildJob job;
  job.preflight = true;
  job.limits = limits;
  ChildResult child;
  try {
    child = run_child(child_request(options, job, timeout));
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
  return tail->warnings;
}

}  // namespace forktrial::sandbox
