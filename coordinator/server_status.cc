// What the coordinator tells: job status, results, workers, and the status
// page's JSON API.
#include "coordinator/server_impl.h"

namespace forktrial::coordinator::detail {

ordered_json Server::status_json(const JobStatus& job, Instant now) const {
  ordered_json counts = ordered_json::object();
  for (std::size_t s = 0; s < kTrialStatusCount; ++s) {
    counts[std::string(trial_status_name(static_cast<TrialStatus>(s)))] = job.counts[s];
  }
  ordered_json outcomes = ordered_json::object();
  for (std::size_t o = 0; o < kOutcomes.size(); ++o) {
    outcomes[std::string(outcome_name(kOutcomes[o]))] = job.outcomes[o];
  }
  ordered_json queued = ordered_json::object();
  for (const pack::Executor executor : pack::kExecutors) {
    queued[std::string(pack::executor_name(executor))] =
        job.queued_by_executor[static_cast<std::size_t>(executor)];
  }
  return ordered_json{
      {"job", job.id.str()},
      {"name", job.name},
      {"priority", job.priority},
      {"cancelled", job.cancelled},
      {"total", job.trials},
      {"done", job.done()},
      {"finished", job.finished()},
      {"status", counts},
      {"outcomes", outcomes},
      {"failed_attempts", job.failed_attempts},
      {"fenced_reports", job.fenced_reports},
      // Reconciled from the result cache, not run (counted in `status` and
      // `outcomes` as the job's results they are).
      {"cached", job.cached},
      {"submitted_at", timestamp_json(job.submitted_at)},
      {"finished_at", job.finished_at ? timestamp_json(*job.finished_at) : ordered_json(nullptr)},
      {"throughput", activity_.throughput(job, now)},
      {"owner", job.owner},
      {"queued_by_executor", queued},
      {"waiting", waiting_reason(job)},
      {"state", std::string(job.state())},
      {"dropped",
       {{"cancelled", job.count(TrialStatus::cancelled)},
        {"abandoned", job.count(TrialStatus::abandoned)}}},
      // Its own retention; null: the policy gc is given.
      {"keep_forks", job.retention
                         ? ordered_json{{"keep", std::string(keep_forks_name(job.retention->keep))},
                                        {"after_ms", job.retention->after.count()}}
                         : ordered_json(nullptr)}};
}

ordered_json Server::waiting_reason(const JobStatus& job) const {
  if (job.count(TrialStatus::queued) == 0 || job.cancelled) return nullptr;
  bool anyone = false;
  for (const WorkerStatus& worker : scheduler_.workers()) anyone = anyone || worker.alive;
  if (!anyone) {
    return "no worker is alive: its " + std::to_string(job.count(TrialStatus::queued)) +
           " queued trials wait for one to join";
  }
  std::string why;
  for (const pack::Executor executor : pack::kExecutors) {
    const std::uint64_t count = job.queued_by_executor[static_cast<std::size_t>(executor)];
    if (count == 0 || scheduler_.workers_offering(executor) > 0) continue;
    if (!why.empty()) why += "; ";
    why += std::to_string(count) + " queued trials need the " +
           std::string(pack::executor_name(executor)) + " executor, which no live worker offers";
    if (executor == pack::Executor::activegraph) {
      why += " (a worker offers it when activegraph imports with its --python)";
    }
  }
  if (why.empty()) return nullptr;
  return why;
}

ordered_json Server::timestamp_json(Instant at) {
  return format_timestamp(at.time_since_epoch().count());
}

void Server::look_at_store() {
  const auto steady = world_.monotonic_now();
  if (next_store_look_ && steady < *next_store_look_) return;
  next_store_look_ = steady + std::chrono::seconds(1);
  disk_ = StoreDisk{world_.free_bytes(config_.store), store_file_bytes(config_.store),
                    store_.map_size(), coordinator_store_options(world_, config_).max_map_size,
                    world_.disk_bytes(config_.store)};
  std::optional<std::uint64_t> records;
  try {
    const auto log = store_.snapshot().run(kOrchestrationRun);
    records = log ? log->head : 0;
  } catch (const store::ResizeBlocked&) {
    // Another process grew the map and it cannot follow yet: next time.
  }
  metrics_.observe_store(disk_, records);
  metrics_.observe_process(steady);
  auto warning = disk_warning(disk_, config_.store);
  if (warning && !disk_warning_) log_(LogLevel::warn, *warning);
  if (!warning && disk_warning_) {
    log_(LogLevel::info, "the store's disk has room again (" +
                             (disk_.free_bytes ? std::to_string(*disk_.free_bytes) : "unknown") +
                             " bytes free)");
  }
  disk_warning_ = std::move(warning);
}

void Server::add_store_warnings(ordered_json& doc) const {
  if (store_full_) doc["store_full"] = *store_full_;
  if (disk_warning_) doc["disk_warning"] = *disk_warning_;
  if (!set_aside_.empty()) {
    ordered_json records = ordered_json::array();
    for (const SetAside& record : set_aside_) {
      records.push_back({{"record", record.ordinal}, {"type", record.type}, {"why", record.why}});
    }
    doc["log_set_aside"] = std::move(records);
  }
}

ordered_json Server::jobs_doc(Instant now, bool mine) const {
  ordered_json all = ordered_json::array();
  for (const auto& status : scheduler_.jobs()) {
    if (!mine || may_act_on(status)) all.push_back(status_json(status, now));
  }
  ordered_json doc{{"jobs", all}};
  add_store_warnings(doc);
  doc["store_disk"] = {
      {"free_bytes", disk_.free_bytes ? ordered_json(*disk_.free_bytes) : ordered_json(nullptr)},
      {"store_bytes", disk_.store_bytes},
      {"map_bytes", disk_.map_bytes},
      {"map_limit_bytes", disk_.map_limit_bytes},
      {"disk_bytes", disk_.disk_bytes ? ordered_json(*disk_.disk_bytes) : ordered_json(nullptr)}};
  return doc;
}

ordered_json Server::job_doc(const JobStatus& status, Instant now) const {
  ordered_json doc = status_json(status, now);
  add_store_warnings(doc);
  return doc;
}

void Server::reply_json(const std::string& route, std::uint64_t request, const ordered_json& doc,
                        bool workers) {
  wire::MessageBuilder message;
  auto envelope = wire::start(message, request);
  if (workers) {
    envelope.initWorkers().setText(doc.dump());
  } else {
    envelope.initJobStatus().setText(doc.dump());
  }
  reply(route, wire::encode(message));
}

bool Server::may_act_on(const JobStatus& job) const {
  if (!zap_) return true;
  return client_ && (client_->admin || client_->key == job.owner);
}

bool Server::may_fork(const store::RunInfo& run) const {
  if (coordinator_run_id(run.id.str())) return false;
  if (!zap_ || run.owner.empty()) return true;
  return client_ && (client_->admin || client_->key == run.owner);
}

std::string Server::no_run_to_fork(const std::string& run) const {
  if (coordinator_run_id(run)) {
    return "run " + run +
           " is the coordinator's own (its log, a finished job's archive or a trial's fork), "
           "which no job or import may fork; to go on from a trial's fork, export it (forktrial "
           "run export) and import it as a run of your own";
  }
  // Another client's run is answered as one that does not exist (decision
  // 0073): the answer tells a key nothing of what others imported.
  // The client's command line says what to do (import it), once a job.
  return "no run " + run + " in the coordinator's store " + config_.store.string();
}

void Server::refuse_not_theirs(const std::string& route, std::uint64_t request,
                               const std::string& job, std::string_view what) {
  reply_error(route, request, ErrorCode::not_found,
              "no job " + job +
                  " of this client's key: only the key that submitted a job, "
                  "or an administrator's (the coordinator's --admin-clients), may " +
                  std::string(what) + " it");
}

void Server::on_status(const std::string& route, Envelope::Reader envelope) {
  const std::string job = wire::text(envelope.getStatusRequest().getJob());
  if (job.empty())
    return reply_json(route, envelope.getRequestId(), jobs_doc(clock_now(), true), false);
  auto status = scheduler_.job_status(JobId(job));
  if (status && !may_act_on(*status)) {
    return refuse_not_theirs(route, envelope.getRequestId(), job, "read");
  }
  if (!status) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::not_found, "no job " + job);
  }
  const auto hold = std::min<std::chrono::steady_clock::duration>(
      std::chrono::milliseconds(envelope.getStatusRequest().getHoldMillis()), kMaxStatusHold);
  held_statuses_.erase(route);
  if (hold.count() > 0 && !status->finished() && held_statuses_.size() < kMaxHeldStatuses) {
    held_statuses_.emplace(
        route, HeldStatus{JobId(job), envelope.getRequestId(), world_.monotonic_now() + hold});
    return;
  }
  reply_json(route, envelope.getRequestId(), job_doc(*status, clock_now()), false);
}

void Server::serve_held_statuses(Instant now) {
  const auto steady = world_.monotonic_now();
  for (auto it = held_statuses_.begin(); it != held_statuses_.end();) {
    const HeldStatus& held = it->second;
    const auto status = scheduler_.job_status(held.job);
    if (!status) {
      reply_error(it->first, held.request, ErrorCode::not_found, "no job " + held.job.str());
    } else if (status->finished() || steady >= held.until) {
      reply_json(it->first, held.request, job_doc(*status, now), false);
    } else {
      ++it;
      continue;
    }
    it = held_statuses_.erase(it);
  }
}

void Server::on_results(const std::string& route, Envelope::Reader envelope) {
  auto query = envelope.getResultsRequest();
  const JobId job(wire::text(query.getJob()));
  auto status = scheduler_.job_status(job);
  if (status && !may_act_on(*status)) {
    return refuse_not_theirs(route, envelope.getRequestId(), job.str(), "read");
  }
  if (!status) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::not_found, "no job " + job.str());
  }
  const auto total = static_cast<std::uint32_t>(status->trials);
  const std::uint32_t from = std::min(query.getAfter(), total);
  const std::uint32_t limit = std::clamp<std::uint32_t>(query.getLimit(), 1, 2000);
  const std::uint32_t to = std::min<std::uint64_t>(total, std::uint64_t{from} + limit);
  wire::MessageBuilder message;
  auto results = wire::start(message, envelope.getRequestId()).initResults();
  auto lines = results.initLines(to - from);
  const auto snapshot = store_.snapshot();
  for (std::uint32_t i = from; i < to; ++i) {
    lines.set(i - from, result_line(TrialId{job, i}, snapshot));
  }
  results.setNext(to);
  results.setTotal(total);
  reply(route, wire::encode(message));
}

std::string Server::result_line(const TrialId& trial, const store::Snapshot& snapshot) {
  if (const auto job = scheduler_.job_status(trial.job); job && job->archived) {
    return archived_line(trial, snapshot);
  }
  if (auto stored = stored_result(trial, snapshot)) return std::move(*stored);
  auto state = scheduler_.trial_state(trial);
  return line_without_result(trial, state->status, state->attempt,
                             state->worker.value_or(WorkerId("")), state->reasons,
                             *scheduler_.payload(trial));
}

std::string Server::archived_line(const TrialId& trial, const store::Snapshot& snapshot) {
  auto archived = read_archived_trial(snapshot, trial);
  if (!archived || !*archived) {
    const std::string why =
        archived ? "its job's archive does not hold it" : archived.error().message;
    log_(LogLevel::error, "no result for " + trial.str() + ": " + why);
    return ordered_json{{"trial", trial.str()},
                        {"job", trial.job.str()},
                        {"index", trial.index},
                        {"error", "the coordinator cannot read this trial: " + why}}
        .dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
  const ArchivedTrial& t = **archived;
  if (t.line) return t.result;
  if (!t.result.empty() && t.outcome) {
    auto line = result_from_verdict(trial, ordered_json::parse(t.result, nullptr, false),
                                    t.input.payload, t.attempt, t.worker, *t.outcome);
    if (line) return std::move(*line);
  }
  return line_without_result(trial, t.status, t.attempt, t.worker, t.reasons, t.input.payload);
}

std::string Server::line_without_result(const TrialId& trial, TrialStatus status, Attempt attempt,
                                        const WorkerId& worker,
                                        const std::vector<std::string>& reasons,
                                        const std::string& payload) {
  auto submitted = read_payload(payload, specs_);
  ordered_json line = result_json(trial, attempt, *submitted, {}, worker);
  line["status"] = std::string(trial_status_name(status));
  line["outcome"] = nullptr;
  line["exit_code"] = nullptr;
  line["detail"] = "";
  for (const auto& reason : reasons) {
    line["detail"] = line["detail"].get<std::string>() +
                     (line["detail"].get<std::string>().empty() ? "" : "\n") + reason;
  }
  line["fork_run_id"] = nullptr;
  line["events_appended"] = nullptr;
  line["behavior_failures"] = nullptr;
  line["duration_ms"] = nullptr;
  line["isolation"] = nullptr;
  return line.dump();
}

void Server::on_workers(const std::string& route, std::uint64_t request) {
  reply_json(route, request, workers_doc(), true);
}

ordered_json Server::workers_doc() const {
  ordered_json list = ordered_json::array();
  for (const auto& w : scheduler_.workers()) {
    list.push_back({{"worker", w.id.str()},
                    {"alive", w.alive},
                    {"slots", w.slots},
                    {"prefetch", w.prefetch},
                    {"leases", w.leases},
                    {"running", w.running()},
                    {"prefetched", w.prefetched()},
                    {"last_seen", format_timestamp(w.last_seen.time_since_epoch().count())},
                    {"cached_digests", w.cached_digests}});
    // The executors it offers, with their versions when this process heard
    // its hello.
    const auto info = worker_info_.find(w.id);
    ordered_json executors = ordered_json::array();
    for (const pack::Executor executor : w.executors) {
      ordered_json offer{{"name", std::string(pack::executor_name(executor))}};
      if (info != worker_info_.end() && info->second.executors.contains(executor)) {
        offer["version"] = info->second.executors.at(executor);
      }
      executors.push_back(std::move(offer));
    }
    list.back()["executors"] = std::move(executors);
    // Refused further hellos, and why (server_workers.cc).
    if (const auto q = quarantined_ids_.find(w.id); q != quarantined_ids_.end()) {
      list.back()["quarantined"] = q->second;
    }
    // What its hello said of its host, when this process heard it.
    if (info != worker_info_.end()) {
      list.back()["degraded_nets"] = info->second.warnings;
      list.back()["isolation"] = info->second.isolation;
    }
  }
  ordered_json doc{
      {"workers", list}, {"errors_answered", errors_}, {"replies_undelivered", undelivered_}};
  if (store_full_) doc["store_full"] = *store_full_;
  return doc;
}

std::optional<std::string> Server::status_view() const {
  if (!zap_) {
    return "every client's jobs: this coordinator has no client keys, so every client is the "
           "same";
  }
  if (config_.http_private) {
    return "every client's jobs: this coordinator has client keys, and its operator declared "
           "this address (" +
           config_.http->str() + ") private with --http-private";
  }
  if (config_.http && transport::endpoint_is_local("tcp://" + config_.http->str())) {
    return "every client's jobs: this coordinator has client keys, and serves this page on a "
           "loopback address (" +
           config_.http->str() + "), reachable from its host alone";
  }
  return std::nullopt;
}

transport::HttpResponse Server::answer_api(const transport::HttpRequest& request) {
  const Instant now = clock_now();
  // /api/* shows every client's jobs: with client keys, only where the
  // operator alone reaches it.
  const auto view = status_view();
  if (!view) {
    return status_json_response(
        403,
        ordered_json{{"error",
                      "this coordinator has client keys, and its status API shows every client's "
                      "jobs: it answers only on a loopback --http address, or on one its operator "
                      "declares private with --http-private; clients read their own jobs with "
                      "forktrial status and results"}});
  }
  if (request.path == "/api/jobs") {
    ordered_json doc = jobs_doc(now);
    doc["view"] = *view;
    return status_json_response(200, doc);
  }
  if (request.path == "/api/workers") return status_json_response(200, workers_doc());
  const auto unknown_job = [](const std::string& id) {
    return status_json_response(
        404, ordered_json{{"error", "no job " + id + ": /api/jobs lists the jobs it knows"}});
  };
  const auto no_job_given = [&](const std::string& parameter) {
    return status_json_response(
        400, ordered_json{{"error", "give the job: " + request.path + "?" + parameter + "=JOB"}});
  };
  if (request.path == "/api/failures") {
    // Without job=, every job's failures.
    const auto job = transport::query_parameter(request.query, "job");
    if (job && job->empty()) return no_job_given("job");
    if (job && !scheduler_.job_status(JobId(*job))) return unknown_job(*job);
    return status_json_response(200, failures_doc(job));
  }
  const bool one_job = request.path == "/api/job";
  if (!one_job && request.path != "/api/candidates") {
    return status_json_response(404, ordered_json{{"error", "no such page: " + request.path}});
  }
  const std::string parameter = one_job ? "id" : "job";
  const auto id = transport::query_parameter(request.query, parameter);
  if (!id || id->empty()) return no_job_given(parameter);
  const auto status = scheduler_.job_status(JobId(*id));
  if (!status) return unknown_job(*id);
  if (one_job) return status_json_response(200, job_doc(*status, now));
  return status_json_response(200, candidates_doc(*status));
}

ordered_json Server::candidates_doc(const JobStatus& job) const {
  constexpr std::size_t kRankedShown = 1000;
  CandidateTally tally;
  const bool in_memory = scheduler_.visit_trials(job.id, [&](const TrialSummary& trial) {
    tally.add(payload_candidate(trial.payload),
              trial.outcome ? outcome_name(*trial.outcome) : trial_status_name(trial.status));
  });
  if (!in_memory) {
    auto visited = visit_archive(store_.snapshot(), job.id, [&](ArchivedTrial&& trial) {
      tally.add(payload_candidate(trial.input.payload),
                trial.outcome ? outcome_name(*trial.outcome) : trial_status_name(trial.status));
    });
    if (!visited)
      log_(LogLevel::error, "ranking job " + job.id.str() + ": " + visited.error().message);
  }
  const auto ranked = tally.ranked();
  ordered_json list = ordered_json::array();
  for (std::size_t i = 0; i < ranked.size() && i < kRankedShown; ++i) {
    list.push_back(candidate_rank_json(ranked[i]));
  }
  return ordered_json{{"job", job.id.str()},
                      {"name", job.name},
                      {"total", job.trials},
                      {"candidates_total", ranked.size()},
                      {"candidates", list}};
}

ordered_json Server::failures_doc(const std::optional<std::string>& job) {
  ordered_json list = ordered_json::array();
  const auto snapshot = store_.snapshot();
  for (const Activity::Failure& failure : activity_.failures()) {
    if (job && failure.trial.job.str() != *job) continue;
    ordered_json line = ordered_json::parse(result_line(failure.trial, snapshot), nullptr, false);
    if (line.is_discarded()) continue;
    line["ended_at"] = timestamp_json(failure.at);
    list.push_back(std::move(line));
  }
  return ordered_json{{"failures", list}, {"kept", Activity::kFailuresKept}};
}

}  // namespace forktrial::coordinator::detail
