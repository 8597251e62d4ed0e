// The coordinator's workers: hellos, offers (parked while nothing is
// queued), assignments, heartbeats, failed attempts and goodbyes.
#include "coordinator/server_impl.h"

namespace forktrial::coordinator::detail {

void Server::on_worker_hello(const std::string& route, Envelope::Reader envelope, Instant now) {
  auto hello = envelope.getWorkerHello();
  // The id goes into the log and into every result: plain and short.
  const std::string id = wire::text(hello.getWorkerId());
  if (auto bad = named_text_problem("worker id", id, kMaxWorkerIdBytes)) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::invalid_argument,
                       *bad + "; start the worker with a plain --id");
  }
  // A key bound to a worker id joins under that id only, and a bound id
  // is taken by its key only: an admitted key cannot take over another
  // worker's leases by naming it.
  if (bound_id_ && *bound_id_ != id) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::failed_precondition,
                       "this worker's key may join only as worker " + *bound_id_ +
                           " (the coordinator's --allow-workers binds it); start the worker "
                           "with --id " +
                           *bound_id_);
  }
  if (!bound_id_ && bound_ids_.contains(id)) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::conflict,
                       "worker id " + id +
                           " is bound to another key on the coordinator's --allow-workers; "
                           "start this worker with another --id");
  }
  WorkerHello input;
  input.id = WorkerId(id);
  input.slots = hello.getSlots();
  input.prefetch = hello.getPrefetch();
  for (auto digest : hello.getCached()) {
    if (auto d = wire::digest_of(digest)) input.cached.push_back(*d);
  }
  // What it offers: executors this coordinator does not know are left out
  // (a newer worker's), and a hello without the list is a worker that runs
  // Lua alone.
  std::map<pack::Executor, std::string> offers;
  const auto executors = hello.getExecutors();
  for (unsigned i = 0; i < executors.size() && i < kMaxExecutorOffers; ++i) {
    const auto name = executors[i].getName();
    const auto executor = pack::executor_named(std::string_view(name.begin(), name.size()));
    if (!executor) continue;
    offers.try_emplace(*executor, wire::prose(executors[i].getVersion(), kMaxVersionBytes));
  }
  if (executors.size() == 0) offers.emplace(pack::Executor::lua, "");
  input.executors.clear();
  for (const auto& [executor, version] : offers) input.executors.push_back(executor);
  // A live worker this process has not heard from yet is one that was
  // connected before this coordinator restarted: it keeps the leases
  // `recover` renewed, and its next heartbeat says which it still runs.
  // Otherwise a hello starts a new incarnation, ending the old one's.
  const auto known = scheduler_.worker_status(input.id);
  const bool reconnected = known && known->alive && !worker_routes_.contains(input.id);
  // A hello from a live worker ends its incarnation's leases, and each of
  // their trials spends an attempt: a worker saying hello again and again
  // would abandon every trial it is leased. A key that does it twice within
  // ten minutes is quarantined, and named. Without keys anyone may join
  // under any id, so there is no one to hold to account: no quarantine.
  const std::string who = worker_key_ ? "key " + *worker_key_ : "";
  const auto refuse_quarantined = [&](const std::string& why) {
    reply_error(route, envelope.getRequestId(), ErrorCode::failed_precondition,
                "this worker is quarantined (" + who + "): " + why +
                    "; find out why it says hello again while it holds leases, then restart "
                    "the coordinator to let it join");
  };
  if (const auto found = quarantined_.find(who); !who.empty() && found != quarantined_.end()) {
    return refuse_quarantined(found->second);
  }
  if (!who.empty() && !reconnected && known && known->alive && known->leases > 0) {
    auto& times = lease_ending_hellos_[who];
    while (!times.empty() && times.front() + kQuarantineWindow < now) times.pop_front();
    times.push_back(now);
    if (times.size() >= kQuarantineAfter) {
      const std::string why = "its hellos ended its live leases " + std::to_string(times.size()) +
                              " times within " +
                              std::to_string(kQuarantineWindow.count() / 60'000) +
                              " minutes, each costing every leased trial an attempt (the last, "
                              "as worker " +
                              id + ", ended " + std::to_string(known->leases) + ")";
      quarantined_[who] = why;
      quarantined_ids_[input.id] = why;
      lease_ending_hellos_.erase(who);
      log_(LogLevel::error, "quarantined worker " + id + " (" + who + "): " + why +
                                "; its hellos are refused until the coordinator restarts");
      // Its live incarnation ends now, as this hello would have ended it:
      // its trials go to others without waiting for its leases to lapse.
      if (!store_full_) keep(scheduler_.worker_lost(input.id, "quarantined: " + why, now));
      forget_connection(input.id);
      return refuse_quarantined(why);
    }
  }
  if (!reconnected) {
    if (store_full_) return reply_busy(route, envelope.getRequestId());
    auto joined = scheduler_.worker_joined(input, now);
    if (!joined) {
      return reply_error(route, envelope.getRequestId(), joined.error());
    }
    keep(std::move(*joined));
  }
  // A worker that joins again from a new connection leaves its old one.
  forget_connection(input.id);
  peers_[route] = Peer{Peer::Role::worker, input.id};
  worker_routes_[input.id] = route;
  log_(LogLevel::info, "worker " + input.id.str() +
                           (reconnected ? " reconnected, keeping its leases," : " joined") +
                           " with " + std::to_string(input.slots) + " slots");
  WorkerInfo& info = worker_info_[input.id];
  info.executors = std::move(offers);
  info.warnings.clear();
  const auto warnings = hello.getWarnings();
  for (unsigned i = 0; i < warnings.size() && i < sandbox::kMaxVerdictWarnings; ++i) {
    info.warnings.push_back(wire::prose(warnings[i], sandbox::kMaxVerdictWarningBytes));
    log_(LogLevel::warn, "worker " + input.id.str() + ": " + info.warnings.back());
  }
  if (warnings.size() > sandbox::kMaxVerdictWarnings) {
    info.warnings.push_back(std::to_string(warnings.size() - sandbox::kMaxVerdictWarnings) +
                            " more warnings were cut");
  }
  // Its guarantees, as JSON: kept when they are a small object, else
  // shown as unknown.
  const auto isolation = hello.getIsolation();
  info.isolation = isolation.size() <= kMaxIsolationBytes
                       ? ordered_json::parse(wire::text(isolation), nullptr, false)
                       : ordered_json();
  if (!info.isolation.is_object()) info.isolation = nullptr;
  wire::MessageBuilder message;
  wire::start(message, envelope.getRequestId())
      .initWelcome()
      .setLeaseMillis(static_cast<std::uint64_t>(config_.scheduler.lease_duration.count()));
  reply(route, wire::encode(message));
}

void Server::on_request_work(const std::string& route, const WorkerId& worker,
                             Envelope::Reader envelope, Instant now) {
  parked_.erase(route);
  const std::uint32_t free = envelope.getRequestWork().getFreeSlots();
  // A worker the scheduler does not hold alive is answered at once (with
  // outOfOrder, by assign), so that it says hello again.
  const auto status = scheduler_.worker_status(worker);
  if (free > 0 && !scheduler_.has_work_for(worker) && status && status->alive) {
    // Nothing to give: the offer waits here (long poll) until there is,
    // rather than the worker asking again and again.
    parked_[route] = Parked{worker, free, envelope.getRequestId(), world_.monotonic_now()};
    return;
  }
  assign(route, worker, free, envelope.getRequestId(), now);
}

void Server::serve_parked(Instant now) {
  const auto steady = world_.monotonic_now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    const Parked& p = it->second;
    if (scheduler_.has_work_for(p.worker) || steady - p.since >= kParkLimit) {
      assign(it->first, p.worker, p.free, p.request, now);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::assign(const std::string& route, const WorkerId& worker, std::uint32_t free,
                    std::uint64_t request, Instant now) {
  auto work = scheduler_.request_work(worker, free, now);
  if (!work) return reply_error(route, request, work.error());
  keep(std::move(work->records));
  wire::MessageBuilder message;
  auto list = wire::start(message, request)
                  .initAssignments()
                  .initAssignments(static_cast<unsigned>(work->assignments.size()));
  std::optional<store::Snapshot> snapshot;  // read once, for activegraph trials alone
  for (unsigned i = 0; i < work->assignments.size(); ++i) {
    const Assignment& a = work->assignments[i];
    auto out = list[i];
    auto ref = out.initTrial();
    ref.setJob(a.trial.job.str());
    ref.setIndex(a.trial.index);
    ref.setAttempt(a.attempt);
    const SubmittedTrial& submitted = submitted_trial(a.trial);
    const std::string& spec = submitted.spec_json();
    out.setSpec(capnp::Text::Reader(spec.data(), spec.size()));
    out.setForkRunId(fork_run_of(a.trial, a.attempt).str());
    wire::set_digest(out.initSegment(), *scheduler_.segment(a.trial));
    auto packs = sandbox::packs_in_load_order(submitted.spec());
    auto bundles = out.initBundles(static_cast<unsigned>(packs.size()));
    for (unsigned p = 0; p < packs.size(); ++p) {
      wire::set_digest(bundles[p].initPin(), *packs[p]->expected_bundle_hash);
      wire::set_digest(bundles[p].initArchive(), *wire::archive_of_root(packs[p]->root_dir));
    }
    out.setLeaseExpiresMillis(a.expires.time_since_epoch().count());
    // activegraph's child finds the parent's goal and frame on the fork's row.
    if (scheduler_.executor(a.trial) == pack::Executor::activegraph) {
      if (!snapshot) snapshot.emplace(store_.snapshot());
      if (const auto parent = snapshot->run(submitted.spec().parent_run_id)) {
        auto context = out.initParentRun();
        if (parent->goal) context.getGoal().setGoalText(*parent->goal);
        if (parent->frame_id) context.getFrame().setFrameId(*parent->frame_id);
      }
    }
  }
  reply(route, wire::encode(message));
}

void Server::on_heartbeat(const std::string& route, const WorkerId& worker,
                          Envelope::Reader envelope, Instant now) {
  std::vector<AttemptRef> running;
  for (auto ref : envelope.getHeartbeat().getRunning()) {
    running.push_back({TrialId{JobId(wire::text(ref.getJob())), ref.getIndex()}, ref.getAttempt()});
  }
  auto beat = scheduler_.heartbeat(worker, running, now);
  if (!beat) {
    return reply_error(route, envelope.getRequestId(), beat.error());
  }
  // Always answered: a worker that hears nothing presumes a restart.
  if (beat->stale.empty()) return reply_ok(route, envelope.getRequestId());
  send_stop(route, beat->stale);
}

void Server::send_stop(const std::string& route, const std::vector<AttemptRef>& trials) {
  wire::MessageBuilder message;
  auto list =
      wire::start(message, 0).initStopTrials().initTrials(static_cast<unsigned>(trials.size()));
  for (unsigned i = 0; i < trials.size(); ++i) {
    list[i].setJob(trials[i].trial.job.str());
    list[i].setIndex(trials[i].trial.index);
    list[i].setAttempt(trials[i].attempt);
  }
  reply(route, wire::encode(message));
}

const SubmittedTrial& Server::submitted_trial(const TrialId& trial) {
  auto it = submitted_.find(trial);
  if (it != submitted_.end()) return it->second;
  auto parsed = read_payload(*scheduler_.payload(trial), specs_);
  if (!parsed) {
    throw Error(forktrial::ErrorCode::internal,
                "trial " + trial.str() + " was recorded unreadable: " + parsed.error().message);
  }
  return submitted_.emplace(trial, std::move(*parsed)).first->second;
}

void Server::on_attempt_failed(const std::string& route, const WorkerId& worker,
                               Envelope::Reader envelope, Instant now) {
  auto failed = envelope.getAttemptFailed();
  const TrialId trial{JobId(wire::text(failed.getTrial().getJob())), failed.getTrial().getIndex()};
  const std::string reason =
      "worker " + worker.str() + ": " + wire::prose(failed.getReason(), kMaxReasonBytes);
  auto result =
      scheduler_.attempt_failed(worker, trial, failed.getTrial().getAttempt(), reason, now);
  keep(std::move(result.records));
  log_(LogLevel::warn, "trial " + trial.str() + " attempt " +
                           std::to_string(failed.getTrial().getAttempt()) + " failed: " + reason);
  ack(route, envelope.getRequestId(), failed.getTrial(), wire_verdict(result.verdict),
      result.reason);
}

void Server::forget_connection(const WorkerId& worker) {
  if (auto old = worker_routes_.find(worker); old != worker_routes_.end()) {
    peers_.erase(old->second);
    worker_routes_.erase(old);
  }
  // An offer the connection left waiting must not lease trials to a route
  // nobody reads.
  std::erase_if(parked_, [&](const auto& entry) { return entry.second.worker == worker; });
}

void Server::on_worker_goodbye(const std::string& route, const WorkerId& worker,
                               Envelope::Reader envelope, Instant now) {
  const std::string said = wire::prose(envelope.getWorkerGoodbye().getReason(), kMaxReasonBytes);
  // Each attempt it held fails with "worker <id> lost: it said goodbye: ...".
  const std::string reason = "it said goodbye" + (said.empty() ? "" : ": " + said);
  // Recorded before the answer, as every decision is: the requeues and
  // worker.lost are committed with the turn, then the worker hears ok.
  Records lost = scheduler_.worker_lost(worker, reason, now);
  const std::size_t held = lost.empty() ? 0 : lost.size() - 1;  // its leases, then worker.lost
  keep(std::move(lost));
  log_(LogLevel::info, "worker " + worker.str() + " said goodbye" +
                           (said.empty() ? "" : " (" + said + ")") + ": lost now; " +
                           std::to_string(held) + (held == 1 ? " lease" : " leases") +
                           " it held ended at once (requeued, or abandoned after the last "
                           "attempt)");
  // The route goes with it: what it sends next is a stranger's, until it
  // says hello again. (`worker` is the peer's own entry, which the erase
  // frees: the route map is looked up first.)
  parked_.erase(route);
  if (auto it = worker_routes_.find(worker); it != worker_routes_.end() && it->second == route) {
    worker_routes_.erase(it);
  }
  peers_.erase(route);
  reply_ok(route, envelope.getRequestId());
}

}  // namespace forktrial::coordinator::detail
