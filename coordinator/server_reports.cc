// The coordinator's reports: judged, held to the rules every delta is held
// to, reconciled in the turn's one transaction, and acknowledged after it.
#include "coordinator/server_impl.h"

namespace forktrial::coordinator::detail {

std::optional<std::string> Server::result_from_verdict(const TrialId& trial,
                                                       const ordered_json& doc,
                                                       const std::string& payload, Attempt attempt,
                                                       const WorkerId& worker, Outcome outcome) {
  const auto text = [&](const char* key, const std::string& otherwise = "") {
    const auto found = doc.find(key);
    return found != doc.end() && found->is_string() ? found->get<std::string>() : otherwise;
  };
  const auto number = [&](const char* key) {
    const auto found = doc.find(key);
    return found != doc.end() && found->is_number_unsigned() ? found->get<std::uint64_t>() : 0;
  };
  if (!doc.is_object()) return std::nullopt;
  auto submitted = read_payload(payload, specs_);
  const auto executor = pack::executor_named(text("executor", "lua"));
  const auto isolation = sandbox::parse_isolation(text("isolation", "standard"));
  if (!submitted || !executor || !isolation) return std::nullopt;
  sandbox::TrialVerdict v;
  v.outcome = outcome;
  const auto exit_code = doc.find("exit_code");
  v.exit_code =
      exit_code != doc.end() && exit_code->is_number_integer() ? exit_code->get<int>() : 0;
  v.detail = text("detail");
  if (const auto warnings = doc.find("warnings"); warnings != doc.end() && warnings->is_array()) {
    for (const auto& warning : *warnings) {
      if (warning.is_string()) v.warnings.push_back(warning.get<std::string>());
    }
  }
  ordered_json line = result_json(trial, attempt, *submitted, v, worker);
  line["fork_run_id"] = fork_run_of(trial, attempt).str();
  line["events_appended"] = number("events_appended");
  line["behavior_failures"] = number("behavior_failures");
  line["behavior_failures_after_fork"] = number("behavior_failures_after_fork");
  line["duration_ms"] = number("duration_ms");
  // Answered from the result cache: the trial whose result it is.
  const std::string cached_from = text("cached_from");
  line["cached_from"] = cached_from.empty() ? ordered_json(nullptr) : ordered_json(cached_from);
  // And the worker that reported that trial ("": an entry older than this
  // field), whose word the answer is.
  line["cached_worker"] =
      cached_from.empty() ? ordered_json(nullptr) : ordered_json(text("cached_worker"));
  line["executor"] = {{"name", std::string(pack::executor_name(*executor))},
                      {"version", text("executor_version")}};
  const std::string limit = text("limit");
  line["limit"] = limit.empty() ? ordered_json(nullptr) : ordered_json(limit);
  // What isolation the trial had, as its worker ran it and its warnings say.
  line["isolation"] = ordered_json::parse(sandbox::isolation_json(sandbox::trial_isolation(
      *isolation, submitted->spec().limits, v.warnings, pack::executor_name(*executor))));
  return line.dump();
}

void Server::remember_result(const store::EventView& event) {
  auto doc = ordered_json::parse(event.payload, nullptr, false);
  // A trial.settled names its trial as records do; a trial.verdict or
  // trial.result, at its top.
  if (event.type == kSettledType && doc.is_object()) doc = std::move(doc["trial"]);
  if (!doc.is_object() || !doc["job"].is_string() || !doc["index"].is_number_unsigned()) return;
  remember_result(TrialId{JobId(doc["job"].get<std::string>()), doc["index"].get<std::uint32_t>()},
                  event.seq);
}

void Server::remember_result(const TrialId& trial, std::uint64_t seq) {
  auto job = result_seqs_.find(trial.job.str());
  if (job != result_seqs_.end() && trial.index < job->second.size()) {
    job->second[trial.index] = seq;
  }
}

std::optional<Server::StoredResult> Server::stored_result_text(const TrialId& trial,
                                                               const store::Snapshot& snapshot) {
  auto job = result_seqs_.find(trial.job.str());
  if (job == result_seqs_.end() || trial.index >= job->second.size() ||
      job->second[trial.index] == 0) {
    return std::nullopt;
  }
  const std::uint64_t seq = job->second[trial.index];
  auto run = snapshot.run(kOrchestrationRun);
  if (!run) return std::nullopt;
  std::optional<StoredResult> stored;
  snapshot.for_each_event(*run, seq, [&](const store::EventView& event) {
    if (event.seq != seq) return false;
    // A log written before verdicts were cut holds whole result lines.
    if (event.type == kResultType) stored = StoredResult{std::string(event.payload), true};
    if (event.type == kVerdictType) stored = StoredResult{std::string(event.payload), false};
    if (event.type == kSettledType) {
      auto settled = ordered_json::parse(event.payload, nullptr, false);
      if (!settled.is_object() || !settled["verdict"].is_object()) return false;
      stored = StoredResult{settled["verdict"].dump(), false};
    }
    return false;
  });
  return stored;
}

std::optional<std::string> Server::stored_result(const TrialId& trial,
                                                 const store::Snapshot& snapshot) {
  auto stored = stored_result_text(trial, snapshot);
  const auto state = scheduler_.trial_state(trial);
  if (!stored || !state || !state->outcome) return std::nullopt;
  if (stored->line) return std::move(stored->text);
  return result_from_verdict(trial, ordered_json::parse(stored->text, nullptr, false),
                             *scheduler_.payload(trial), state->attempt,
                             state->worker.value_or(WorkerId("")), *state->outcome);
}

Server::WireVerdict Server::wire_verdict(ReportVerdict verdict) {
  switch (verdict) {
    case ReportVerdict::accepted:
      return WireVerdict::ACCEPTED;
    case ReportVerdict::fenced:
      return WireVerdict::FENCED;
    case ReportVerdict::duplicate:
      return WireVerdict::DUPLICATE;
    case ReportVerdict::unknown:
      return WireVerdict::UNKNOWN;
  }
  return WireVerdict::UNKNOWN;
}

void Server::ack(const std::string& route, std::uint64_t request,
                 schema::wire::TrialRef::Reader ref, WireVerdict verdict, std::string_view reason) {
  ack(route, request, TrialId{JobId(wire::text(ref.getJob())), ref.getIndex()}, ref.getAttempt(),
      verdict, reason);
}

void Server::ack(const std::string& route, std::uint64_t request, const TrialId& trial,
                 Attempt attempt, WireVerdict verdict, std::string_view reason) {
  wire::MessageBuilder message;
  auto out = wire::start(message, request).initReportAck();
  auto ref = out.initTrial();
  ref.setJob(trial.job.str());
  ref.setIndex(trial.index);
  ref.setAttempt(attempt);
  out.setVerdict(verdict);
  out.setReason(bounded_text(reason, 1024));
  reply(route, wire::encode(message));
}

void Server::on_report(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                       Instant now) {
  auto report = envelope.getReport();
  const TrialId trial{JobId(wire::text(report.getTrial().getJob())), report.getTrial().getIndex()};
  const Attempt attempt = report.getTrial().getAttempt();
  auto judged = scheduler_.on_report(worker, trial, attempt, now);
  keep(std::move(judged.records));
  if (judged.verdict != ReportVerdict::accepted) {
    if (judged.verdict == ReportVerdict::fenced) {
      log_(LogLevel::info, "fenced a report of " + trial.str() + " attempt " +
                               std::to_string(attempt) + ": " + judged.reason);
    }
    return ack(route, envelope.getRequestId(), report.getTrial(), wire_verdict(judged.verdict),
               judged.reason);
  }
  auto reconciliation =
      reconciliation_of(route, envelope.getRequestId(), worker, trial, attempt, report, now);
  if (!reconciliation) {
    // The worker's parent holds its child to these rules before it
    // reports: a report that breaks them comes from a worker that does
    // not. Nothing of it is recorded, and the attempt failed (the trial
    // runs again, on whichever worker asks next).
    const std::string reason =
        "worker " + worker.str() +
        "'s report breaks the rules every delta is held to: " + reconciliation.error().message;
    log_(LogLevel::warn, "refused the report of " + trial.str() + " attempt " +
                             std::to_string(attempt) + ": " + reason);
    keep(scheduler_.reconcile_failed(trial, reason, now).value_or(Records{}));
    submitted_.erase(trial);
    return ack(route, envelope.getRequestId(), report.getTrial(), WireVerdict::REFUSED, reason);
  }
  // Reconciled with the rest of this turn, in its one transaction; the
  // acknowledgement goes after the commit, saying how it went.
  reconciling_.push_back(std::move(*reconciliation));
}

Server::ForkPointFacts& Server::fork_point(std::uint64_t run_number, const store::EventId& at) {
  auto key = std::make_pair(run_number, at.str());
  if (const auto found = fork_points_.find(key); found != fork_points_.end()) return found->second;
  if (fork_points_.size() >= kMaxForkPoints) fork_points_.clear();
  return fork_points_[std::move(key)];
}

UnixMillis Server::fork_point_time(const sandbox::TrialSpecification& spec) {
  auto snapshot = store_.snapshot();
  auto parent = snapshot.run(spec.parent_run_id);
  if (!parent) return 0;
  ForkPointFacts& facts = fork_point(parent->number, spec.at_event);
  if (!facts.time) {
    auto point = snapshot.find_event(*parent, spec.at_event);
    if (!point) return 0;  // the fork is refused when it is recorded
    facts.time = parse_timestamp(point->timestamp).value_or(0);
  }
  return *facts.time;
}

std::expected<Server::Reconciliation, Status> Server::reconciliation_of(
    const std::string& route, std::uint64_t request, const WorkerId& worker, const TrialId& trial,
    Attempt attempt, schema::wire::Report::Reader report, Instant now) {
  Reconciliation r;
  r.route = route;
  r.request = request;
  r.worker = worker;
  r.trial = trial;
  r.attempt = attempt;
  r.at = now;
  r.duration_ms = report.getDurationMillis();
  r.received = world_.monotonic_now();
  sandbox::TrialVerdict& verdict = r.verdict;
  // An enum holds whatever number the peer wrote.
  const auto outcome_ordinal = static_cast<std::uint16_t>(report.getOutcome());
  auto outcome = outcome_from_ordinal(outcome_ordinal);
  if (!outcome) {
    return failure(ErrorCode::invalid_argument,
                   "outcome " + std::to_string(outcome_ordinal) + " is not one forktrial has");
  }
  verdict.outcome = *outcome;
  switch (report.getIsolation()) {
    case schema::wire::IsolationLevel::STANDARD:
      r.isolation = sandbox::Isolation::standard;
      break;
    case schema::wire::IsolationLevel::STRICT:
      r.isolation = sandbox::Isolation::strict;
      break;
    default:
      return failure(ErrorCode::invalid_argument,
                     "its isolation " +
                         std::to_string(static_cast<std::uint16_t>(report.getIsolation())) +
                         " is neither standard nor strict");
  }
  // What ran it: the executor its candidate needs, at the version the
  // worker's hello offered (a report without one is a Lua worker's).
  const auto needed = scheduler_.executor(trial).value_or(pack::Executor::lua);
  const std::string named = report.hasExecutor() ? wire::text(report.getExecutor().getName()) : "";
  const auto ran = named.empty() ? std::optional(pack::Executor::lua) : pack::executor_named(named);
  if (ran != needed) {
    return failure(ErrorCode::invalid_argument,
                   "it says " + wire::prose(named.empty() ? "lua" : named, 64) +
                       " ran the candidate, which needs the " +
                       std::string(pack::executor_name(needed)) + " executor");
  }
  const std::string version =
      report.hasExecutor() ? wire::prose(report.getExecutor().getVersion(), kMaxVersionBytes) : "";
  const auto info = worker_info_.find(worker);
  const auto offered = info == worker_info_.end() ? std::nullopt
                       : info->second.executors.contains(needed)
                           ? std::optional(info->second.executors.at(needed))
                           : std::nullopt;
  if (!offered) {
    return failure(ErrorCode::invalid_argument, "its worker's hello did not offer the " +
                                                    std::string(pack::executor_name(needed)) +
                                                    " executor");
  }
  if (version != *offered) {
    return failure(ErrorCode::invalid_argument,
                   "it says " + std::string(pack::executor_name(needed)) + " " + version +
                       " ran the candidate, but its worker's hello offered " + *offered);
  }
  r.executor = needed;
  r.executor_version = version;
  verdict.detail = wire::prose(report.getDetail(), sandbox::kMaxVerdictDetailBytes);
  const auto warnings = report.getWarnings();
  for (unsigned i = 0; i < warnings.size() && i < sandbox::kMaxVerdictWarnings; ++i) {
    verdict.warnings.push_back(wire::prose(warnings[i], sandbox::kMaxVerdictWarningBytes));
  }
  if (warnings.size() > sandbox::kMaxVerdictWarnings) {
    verdict.warnings.push_back(std::to_string(warnings.size() - sandbox::kMaxVerdictWarnings) +
                               " more warnings were cut");
  }
  verdict.exit_code = report.getExitCode();
  verdict.stopped_by_net = report.getStoppedByNet();
  verdict.wall_clock_killed = report.getWallClockKilled();
  const auto net_ordinal = static_cast<std::uint16_t>(report.getNet());
  const auto net = net_from_ordinal(net_ordinal);
  if (!net) {
    return failure(ErrorCode::invalid_argument,
                   "its net " + std::to_string(net_ordinal) + " is not one forktrial has");
  }
  if (*net != Net::none && verdict.outcome != Outcome::limits_exceeded) {
    return failure(ErrorCode::invalid_argument,
                   "it names the " + std::string(net_name(*net)) + " net, but its outcome is " +
                       std::string(outcome_name(verdict.outcome)) +
                       "; only a limits_exceeded trial was stopped by a net");
  }
  if (verdict.wall_clock_killed && *net != Net::wall_clock) {
    return failure(ErrorCode::invalid_argument,
                   "it says the wall clock killed the child, but names the " +
                       std::string(net_name(*net)) + " net");
  }
  verdict.net = *net;
  if (verdict.wall_clock_killed &&
      (verdict.outcome != Outcome::limits_exceeded || !verdict.stopped_by_net)) {
    return failure(ErrorCode::invalid_argument,
                   "it says the wall clock killed the child, but its outcome is " +
                       std::string(outcome_name(verdict.outcome)) +
                       (verdict.stopped_by_net ? "" : " and no net stopped it") +
                       "; a parent that kills the child on the wall clock reports limits_exceeded");
  }
  if (report.getHasClaim()) {
    verdict.claimed_events = report.getClaimedEvents();
    verdict.claimed_failures = report.getClaimedFailures();
  }
  const sandbox::TrialSpecification& spec = submitted_trial(trial).spec();
  sandbox::DeltaRules rules("worker " + worker.str(), fork_point_time(spec), spec.limits);
  const auto events = report.getEvents();
  r.events.reserve(std::min<std::size_t>(events.size(), 4096));
  auto view_text = [](capnp::Text::Reader text) {
    return std::string_view(text.begin(), text.size());
  };
  for (auto e : events) {
    store::EventView view;
    view.id = view_text(e.getId());
    view.type = view_text(e.getType());
    view.payload = view_text(e.getPayload());
    view.timestamp = view_text(e.getTimestamp());
    if (e.getActor().isActorName()) view.actor = view_text(e.getActor().getActorName());
    if (e.getFrame().isFrameId()) view.frame_id = view_text(e.getFrame().getFrameId());
    if (e.getCause().isCausedBy()) view.caused_by = view_text(e.getCause().getCausedBy());
    if (const auto& cut = rules.check(view))
      return failure(ErrorCode::invalid_argument, cut->reason);
    r.events.push_back(static_cast<store::NewEvent>(view.to_event()));
  }
  return r;
}

store::Result<std::uint64_t> Server::record_reconciliation(store::Writer& writer,
                                                           const Reconciliation& r,
                                                           const sandbox::TrialVerdict& v,
                                                           std::uint64_t count, Records& records,
                                                           std::vector<Verdict>& verdicts) {
  const SubmittedTrial& submitted = submitted_trial(r.trial);
  const store::RunId fork_id = fork_run_of(r.trial, r.attempt);
  const store::NewRun fork{.id = fork_id, .label = submitted.spec().label};
  // What every trial of this fork point shares, read once per point: its
  // time, its seq and the parent's failures up to it.
  const auto parent = writer.run(submitted.spec().parent_run_id);
  ForkPointFacts* facts = parent ? &fork_point(parent->number, submitted.spec().at_event) : nullptr;
  auto recorded =
      sandbox::record_trial(writer, submitted.spec(), fork, count, sandbox::delta_of(r.events), v,
                            facts ? facts->time : std::nullopt);
  if (!recorded) return recorded;
  records.push_back(TrialReconciled{r.trial, r.attempt, v.outcome, r.at});
  std::optional<store::RunInfo> run;
  const auto fork_run = [&]() -> const store::RunInfo& {
    if (!run) run = writer.run(fork_id);
    return *run;
  };
  std::uint64_t fork_seq = 0;
  if (facts && facts->seq) {
    fork_seq = *facts->seq;
  } else {
    fork_seq = fork_run().fork_of ? fork_run().fork_of->seq : 0;
    if (facts) facts->seq = fork_seq;
  }
  // What the store and the worker established, and nothing the job's
  // specification or the fork's id already say: the result line is this,
  // completed from the job when it is read (result_line).
  const std::uint64_t appended = *recorded - fork_seq;
  // The fork's own failures are the recorded delta's (the first `count`
  // events of the report; the parent's wall-clock record is not one).
  const std::uint64_t failures_after = static_cast<std::uint64_t>(
      std::count_if(r.events.begin(), r.events.begin() + static_cast<std::ptrdiff_t>(count),
                    [](const store::NewEvent& event) { return event.type == "behavior.failed"; }));
  // The store is the record: say when the child claimed otherwise.
  std::string detail = v.detail;
  sandbox::append_detail_line(detail, sandbox::claim_disagreement(v, appended, failures_after));
  // Its trial, attempt, worker and outcome are the trial.settled event's; a
  // value that is its field's default (result_from_verdict's) is left out:
  // a trivial trial's verdict is two fields.
  ordered_json verdict = ordered_json::object();
  if (v.exit_code != 0) verdict["exit_code"] = v.exit_code;
  if (!detail.empty()) verdict["detail"] = detail;
  if (!v.warnings.empty()) verdict["warnings"] = v.warnings;
  verdict["events_appended"] = appended;
  // The fork's failures: its parent's up to the fork point, and its own.
  std::uint64_t failures = failures_after;
  if (facts) {
    if (!facts->failures_before) {
      facts->failures_before =
          writer.events_of_type(fork_run(), "behavior.failed").size() - failures_after;
    }
    failures += *facts->failures_before;
  } else {
    failures = writer.events_of_type(fork_run(), "behavior.failed").size();
  }
  if (failures != 0) verdict["behavior_failures"] = failures;
  if (failures_after != 0) verdict["behavior_failures_after_fork"] = failures_after;
  verdict["duration_ms"] = r.duration_ms;
  if (r.executor != pack::Executor::lua) {
    verdict["executor"] = std::string(pack::executor_name(r.executor));
  }
  if (!r.executor_version.empty()) verdict["executor_version"] = r.executor_version;
  if (v.net != Net::none) verdict["limit"] = std::string(net_name(v.net));
  if (r.isolation != sandbox::Isolation::standard) {
    verdict["isolation"] = std::string(sandbox::isolation_name(r.isolation));
  }
  std::string text = verdict.dump();
  // A completed trial whose result may be reused is the entry of its key
  // (a later trial with the key is answered from it).
  if (const auto key = scheduler_.cache_key(r.trial); key && v.outcome == Outcome::completed) {
    auto entry = put_cache_entry(writer, *key,
                                 CacheEntry{r.trial, fork_id, v.outcome, text, r.worker}, r.at);
    if (!entry) return std::unexpected(std::move(entry.error()));
  }
  verdicts.push_back(Verdict{r.trial, r.attempt, r.worker, std::move(text)});
  return recorded;
}

void Server::reconciled(const Reconciliation& r, const sandbox::TrialVerdict& v,
                        std::uint64_t result_seq) {
  remember_result(r.trial, result_seq);
  metrics_.reconciled(v.outcome, world_.monotonic_now() - r.received,
                      std::chrono::milliseconds(r.duration_ms));
  // Its record is in the log already (record_reconciliation wrote it).
  if (auto applied = scheduler_.reconciled(r.trial, v.outcome, r.at)) {
    for (const auto& record : *applied) activity_.note(record);
  }
  gauges_stale_ = true;
  submitted_.erase(r.trial);
  ack(r.route, r.request, r.trial, r.attempt, WireVerdict::ACCEPTED);
}

bool Server::write_turn() {
  std::vector<Verdict> verdicts;
  Records records;
  auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
    records = pending_;
    verdicts.clear();
    for (const Reconciliation& r : reconciling_) {
      const std::uint64_t count = r.events.size();
      auto recorded = record_reconciliation(writer, r, r.verdict, count, records, verdicts);
      if (!recorded) return recorded;
    }
    return append_records(writer, records, verdicts);
  });
  if (!written) return false;
  if (config_.committed) config_.committed(records);
  pending_committed();
  for (std::size_t i = 0; i < reconciling_.size(); ++i) {
    reconciled(reconciling_[i], reconciling_[i].verdict, verdicts[i].seq);
  }
  reconciling_.clear();
  return true;
}

void Server::reconcile_alone(Reconciliation& r) {
  auto write = [&](const sandbox::TrialVerdict& v, std::uint64_t count) {
    std::vector<Verdict> verdicts;
    Records records;
    auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
      records = pending_;
      verdicts.clear();
      auto recorded = record_reconciliation(writer, r, v, count, records, verdicts);
      if (!recorded) return recorded;
      return append_records(writer, records, verdicts);
    });
    if (written) {
      if (config_.committed) config_.committed(records);
      pending_committed();
      reconciled(r, v, verdicts.front().seq);
    }
    return written;
  };
  auto written = write(r.verdict, r.events.size());
  if (!written && !r.events.empty()) {
    log_(LogLevel::warn,
         "the store refused the delta of " + r.trial.str() + ": " + written.error().message);
    written = write(sandbox::without_delta(r.verdict, written.error().message), 0);
  }
  if (!written) {
    // Nothing of the report is recorded: the attempt failed. A report the
    // store refused is over too: the trial was requeued (or abandoned);
    // the worker has nothing to resend.
    keep(scheduler_
             .reconcile_failed(r.trial, "the store refused the report: " + written.error().message,
                               r.at)
             .value_or(Records{}));
    submitted_.erase(r.trial);
    ack(r.route, r.request, r.trial, r.attempt, WireVerdict::REFUSED,
        "the store refused the report: " + written.error().message);
  }
}

ordered_json Server::result_json(const TrialId& trial, Attempt attempts,
                                 const SubmittedTrial& submitted,
                                 const sandbox::TrialVerdict& verdict, const WorkerId& worker) {
  ordered_json out;
  out["trial"] = trial.str();
  out["job"] = trial.job.str();
  out["index"] = trial.index;
  out["candidate"] = submitted.candidate;
  out["pin"] = submitted.spec().candidate.expected_bundle_hash
                   ? submitted.spec().candidate.expected_bundle_hash->str()
                   : "";
  out["scenario"] = submitted.spec().scenario;
  out["at"] = submitted.spec().at_event.str();
  out["status"] = "reconciled";
  out["outcome"] = std::string(outcome_name(verdict.outcome));
  out["exit_code"] = verdict.exit_code;
  out["detail"] = verdict.detail;
  out["warnings"] = verdict.warnings;
  out["worker"] = worker.str();
  out["attempts"] = attempts;
  return out;
}

}  // namespace forktrial::coordinator::detail
