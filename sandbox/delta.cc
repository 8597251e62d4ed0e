#include "sandbox/delta.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/timestamp.h"
#include "sandbox/tail.h"
#include "schema/records.h"
#include "store/json_text.h"

namespace forktrial::sandbox {

static_assert(kMaxVerdictDetailBytes >= kMaxTailDetailBytes + (std::size_t{8} << 10));
static_assert(kMaxVerdictWarnings >= kMaxTailWarnings);
static_assert(kMaxVerdictWarningBytes >= kMaxTailWarningBytes);

namespace {

using schema::kBehaviorFailed;

// Why a record of the runtime's types or actor is not one the runtime
// writes (runtime/runtime.cc), or nullopt.
std::optional<std::string> runtime_record_problem(const store::EventView& event) {
  const bool runtime_type = schema::is_runtime_record_type(event.type);
  const bool runtime_actor = event.actor && *event.actor == schema::kRuntimeActor;
  const std::string named = "(type " + quoted_excerpt(event.type) + ", actor " +
                            (event.actor ? quoted_excerpt(*event.actor) : "none") + ")";
  if (runtime_type && !runtime_actor) {
    return "poses as a runtime record " + named +
           ": pack.loaded, behavior.* and runtime.* are written by the runtime, as actor "
           "\"runtime\"";
  }
  if (runtime_actor && !runtime_type) {
    return "names the runtime as its actor " + named +
           ", which writes only pack.loaded, behavior.* and runtime.* records";
  }
  if (!event.type.starts_with("behavior.")) return std::nullopt;
  // The runtime's behavior records name the behavior and the event it
  // handled, which is also the record's cause.
  auto members = store::json_text::object_members(event.payload);
  if (!members) return std::nullopt;  // the payload rule names it
  std::optional<std::string_view> behavior;
  std::optional<std::string_view> handled;
  for (const auto& [key, value] : *members) {
    if (key == "behavior") behavior = value;
    if (key == "event_id") handled = value;
  }
  const std::string cause =
      event.caused_by ? nlohmann::json(std::string(*event.caused_by)).dump() : "";
  if (!behavior || !behavior->starts_with('"') || !handled || cause.empty() || *handled != cause) {
    return "is not a behavior record as the runtime writes it " + named +
           ": its payload names the behavior and, as event_id, the event it was caused by";
  }
  return std::nullopt;
}

// The event the parent records when its wall-clock kill stopped the child:
// one millisecond after the last event in the fork, with the next id not
// taken in the fork's history (the parent's prefix and the recorded delta).
store::NewEvent wall_clock_event(const store::Writer& writer, const store::RunInfo& fork,
                                 UnixMillis last, double limit_seconds) {
  store::NewEvent event;
  for (std::uint64_t n = fork.head + 1;; ++n) {
    event.id = store::numbered_event_id(n);
    if (!writer.find_event(fork, event.id)) break;
  }
  event.type = std::string(schema::kWallClockExhausted);
  event.payload = nlohmann::json{
      {"wall_clock_seconds", limit_seconds},
      {"last_accepted_seq",
       fork.head}}.dump();
  event.timestamp = format_timestamp(last + 1);
  event.actor = std::string(schema::kParentActor);
  return event;
}

}  // namespace

void append_detail_line(std::string& detail, const std::string& line) {
  if (line.empty()) return;
  if (!detail.empty()) detail += "\n";
  detail += line;
}

DeltaRules::DeltaRules(std::string whose, UnixMillis tip, const TrialLimits& limits)
    : whose_(std::move(whose)),
      last_(tip),
      limit_events_(limits.max_appended_events),
      limit_bytes_(limits.max_appended_bytes),
      max_events_(limits.max_appended_events == 0
                      ? std::numeric_limits<std::uint64_t>::max()
                      : limits.max_appended_events + schema::kClosingRecords),
      max_bytes_(limits.max_appended_bytes == 0
                     ? std::numeric_limits<std::uint64_t>::max()
                     : limits.max_appended_bytes + schema::kClosingRecordBytes) {}

std::optional<std::string> DeltaRules::broken_rule(const store::EventView& view,
                                                   const std::string& which) {
  if (schema::is_parent_type(view.type) || schema::is_forktrial_type(view.type) ||
      (view.actor && schema::is_forktrial_actor(*view.actor))) {
    return which + " poses as a parent record (type \"" + escape_controls(view.type) +
           "\", actor \"" + escape_controls(view.actor.value_or("")) +
           "\"); only the parent writes those";
  }
  if (auto problem = runtime_record_problem(view)) return which + " " + *problem;
  const store::Event event = view.to_event();
  if (auto problem = store::event_problem(event)) {
    return "the store refuses " + which + ": " + *problem;
  }
  if (auto problem = store::json_text::payload_problem(view.payload)) {
    return "the store refuses " + which + ": its payload is " + *problem;
  }
  if (auto problem = continuity_problem(last_, view)) {
    return which + " does not continue the fork: " + *problem;
  }
  return std::nullopt;
}

const std::optional<DeltaCut>& DeltaRules::check(const store::EventView& view) {
  if (cut_) return cut_;
  const std::string which = whose_ + "'s event " + escape_controls(utf8_prefix(view.id, 256)) +
                            " (number " + std::to_string(accepted_ + 1) + " of its delta)";
  if (auto broken = broken_rule(view, which)) {
    cut_ = DeltaCut{*broken + ". Nothing from it on was recorded", false};
    return cut_;
  }
  last_ = *parse_timestamp(view.timestamp);
  bytes_ += store::event_text_bytes(view.to_event());
  if (accepted_ + 1 > max_events_ || bytes_ > max_bytes_) {
    cut_ =
        DeltaCut{"write budget: " + whose_ +
                     "'s delta goes past max_appended_events = " + std::to_string(limit_events_) +
                     " or max_appended_bytes = " + std::to_string(limit_bytes_) + " at " + which +
                     "; the " + std::to_string(accepted_) + " events before it fit",
                 true};
    return cut_;
  }
  ++accepted_;
  return cut_;
}

DeltaSource delta_of(const std::vector<store::NewEvent>& events) {
  return [&events](const EventVisitor& visit) {
    for (const auto& event : events) {
      if (!visit(store::view_of(event))) return;
    }
  };
}

std::optional<std::string> continuity_problem(std::int64_t previous_ms,
                                              const store::EventView& event) {
  auto stamp = parse_timestamp(event.timestamp);
  if (!stamp) {
    return "event " + std::string(event.id) + " has a timestamp that is not ISO-8601 UTC (" +
           stamp.error().message + ")";
  }
  const auto second = [](std::int64_t ms) { return ms >= 0 ? ms / 1000 : (ms - 999) / 1000; };
  if (second(*stamp) < second(previous_ms)) {
    return "event " + std::string(event.id) + " is stamped " + std::string(event.timestamp) +
           ", before the event it follows (" + format_timestamp(previous_ms) +
           "); a fork's clock never goes backwards";
  }
  return std::nullopt;
}

store::Result<std::uint64_t> record_trial(store::Writer& writer, const TrialSpecification& spec,
                                          const store::NewRun& fork_record, std::uint64_t count,
                                          const DeltaSource& delta, const TrialVerdict& verdict,
                                          std::optional<UnixMillis> fork_point_time) {
  auto fork = writer.fork(spec.parent_run_id, spec.at_event, fork_record);
  if (!fork) return std::unexpected(fork.error());
  const store::RunId fork_id = fork->id;
  std::uint64_t head = fork->head;
  if (!fork_point_time) {
    auto point = writer.find_event(*writer.run(spec.parent_run_id), spec.at_event);
    fork_point_time = point ? parse_timestamp(point->timestamp).value_or(0) : 0;
  }
  UnixMillis last = *fork_point_time;

  // In batches, never holding the delta whole.
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
    delta([&](const store::EventView& view) {
      if (auto problem = continuity_problem(last, view)) {
        refused = store::Refusal{store::Refused::invalid_event, *problem};
        return false;
      }
      last = *parse_timestamp(view.timestamp);
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
  if (copied != count) {
    return std::unexpected(store::Refusal{store::Refused::invalid_input,
                                          "the delta holds " + std::to_string(copied) +
                                              " events, not the " + std::to_string(count) +
                                              " it was recorded with"});
  }
  if (verdict.wall_clock_killed) {
    auto event =
        wall_clock_event(writer, *writer.run(fork_id), last, spec.limits.wall_clock_seconds);
    auto appended = writer.append(fork_id, head, std::span(&event, 1));
    if (!appended) return appended;
    head = *appended;
  }
  return head;
}

TrialVerdict without_delta(TrialVerdict verdict, const std::string& why) {
  if (!verdict.stopped_by_net) {
    // What the child said of itself no longer describes what was recorded.
    verdict.outcome = Outcome::crashed;
    verdict.detail.clear();
    verdict.warnings.clear();
  }
  verdict.claimed_events.reset();
  verdict.claimed_failures.reset();
  append_detail_line(verdict.detail, "the store refused the child's delta (" + why +
                                         "); nothing of it was recorded");
  return verdict;
}

std::string claim_disagreement(const TrialVerdict& verdict, std::uint64_t events_appended,
                               std::uint64_t failures_after_fork) {
  if (!verdict.claimed_events || !verdict.claimed_failures) return "";
  const std::uint64_t parent_events = verdict.wall_clock_killed ? 1 : 0;
  const std::uint64_t stored_child_events = events_appended - parent_events;
  if (*verdict.claimed_events == stored_child_events &&
      *verdict.claimed_failures == failures_after_fork) {
    return "";
  }
  return "the child's tail claimed " + std::to_string(*verdict.claimed_events) +
         " events appended and " + std::to_string(*verdict.claimed_failures) +
         " behavior failures after the fork point, but the store holds " +
         std::to_string(stored_child_events) + " and " + std::to_string(failures_after_fork) +
         "; the store's numbers are reported";
}

TrialReport report_from_store(const store::Snapshot& snapshot, const store::RunId& fork_id,
                              std::uint64_t fork_seq, const TrialVerdict& verdict) {
  TrialReport report;
  report.outcome = verdict.outcome;
  report.net = verdict.net;
  report.fork_run_id = fork_id.str();
  report.detail = verdict.detail;
  report.warnings = verdict.warnings;
  report.exit_code = verdict.exit_code;
  auto fork = snapshot.run(fork_id);
  if (!fork) return report;
  report.events_appended = snapshot.count(*fork) - fork_seq;
  // activegraph counts the fork's whole log (the inherited prefix too); the
  // trial's own share is reported beside it.
  report.behavior_failures = snapshot.events_of_type(*fork, kBehaviorFailed).size();
  report.behavior_failures_after_fork =
      snapshot.events_of_type(*fork, kBehaviorFailed, fork_seq).size();

  // The child's claim is a signal only: say when it disagrees with the store.
  append_detail_line(report.detail, claim_disagreement(verdict, report.events_appended,
                                                       report.behavior_failures_after_fork));
  return report;
}

}  // namespace forktrial::sandbox
