// The coordinator's persistence: every record is in the store before a peer
// hears of it; a full store stops it, loses nothing and resumes; a restart
// replays the log.
#include "coordinator/server_impl.h"

namespace forktrial::coordinator::detail {

void Server::end_turn() {
  probes_.turned();
  probes_.set_ready(!store_full_, store_full_ ? "the store is full: " + *store_full_ : "");
  if (store_full_) {
    probe_store();
  } else {
    keep_tick(clock_now());
    serve_parked(clock_now());
  }
  serve_held_statuses(clock_now());
  flush();
  if (!store_full_) maybe_compact_log();
  if (trim_) {
    // A submission's message, its parse and its record are freed now:
    // give the memory back rather than keep it as the high water.
    give_back_freed_memory();
    trim_ = false;
  }
}

void Server::keep(Records records) {
  for (auto& record : records) {
    activity_.note(record);
    pending_.push_back(std::move(record));
  }
  gauges_stale_ = true;
}

void Server::keep_tick(Instant now) {
  for (const std::string& line : uploads_.expire(now)) log_(LogLevel::warn, line);
  for (auto it = pending_jobs_.begin(); it != pending_jobs_.end();) {
    if (it->second.last + kPendingJobIdle > now) {
      ++it;
      continue;
    }
    log_(LogLevel::warn, "dropped job " + it->first + ", abandoned after " +
                             std::to_string(it->second.next) + " of its " +
                             std::to_string(it->second.parts) + " parts");
    it = pending_jobs_.erase(it);
  }
  Records records = scheduler_.tick(now);
  metrics_.ticked(records);
  keep(std::move(records));
}

void Server::pending_committed() {
  metrics_.committed(pending_);
  pending_.clear();
  // The trials answered from the cache in the transaction: their records
  // follow pending_'s in the log, and apply now.
  Records answered;
  for (const Answer& answer : answering_) {
    if (!answer.record) continue;
    scheduler_.replay(*answer.record);
    activity_.note(*answer.record);
    remember_result(answer.trial, answer.seq);
    answered.push_back(*answer.record);
  }
  answering_.clear();
  if (answered.empty()) return;
  if (config_.committed) config_.committed(answered);
  metrics_.committed(answered);
  gauges_stale_ = true;
  log_(LogLevel::info,
       std::to_string(answered.size()) + " trials answered from the result cache, not run");
}

store::Result<std::uint64_t> Server::append_records(store::Writer& writer,
                                                    std::span<const OrchestrationRecord> records,
                                                    std::span<Verdict> verdicts) {
  auto head = append_to_log(writer, records, {}, config_.job_chunk_bytes, verdicts);
  if (!head || answering_.empty()) return head;
  const Instant now = clock_now();
  Records answered;
  std::vector<store::NewEvent> answers;
  for (Answer& answer : answering_) {
    answer.record.reset();
    auto entry = find_cache_entry(writer, answer.key);
    if (!entry) continue;
    auto decided = scheduler_.cache_answer(answer.trial, entry->source, entry->outcome, now);
    if (!decided) continue;
    // Parsed for a trial answered only (the parse cache makes a repeated
    // specification one parse).
    const auto submitted = read_payload(*scheduler_.payload(answer.trial), specs_);
    if (!submitted) continue;
    const auto& spec = submitted->spec();
    const store::NewRun fork{.id = fork_run_of(answer.trial, decided->attempt),
                             .label = spec.label};
    auto copied = copy_fork(writer, spec, fork, entry->fork);
    if (!copied) return copied;
    // The source's verdict, naming the source: it took no worker time, and
    // its events, failures and isolation are the source's (the copy holds
    // the same events on the same history). It names its trial at its top,
    // as a trial.verdict does.
    ordered_json verdict = ordered_json::parse(entry->verdict, nullptr, false);
    if (!verdict.is_object()) verdict = ordered_json::object();
    verdict["job"] = answer.trial.job.str();
    verdict["index"] = answer.trial.index;
    verdict["duration_ms"] = 0;
    verdict["cached_from"] = entry->source.str();
    // Whose word the answer is: the worker that reported the source.
    verdict["cached_worker"] = entry->worker.str();
    store::NewEvent event;
    event.type = std::string(kVerdictType);
    event.payload = verdict.dump();
    event.timestamp = format_timestamp(now.time_since_epoch().count());
    event.actor = std::string(kCoordinatorActor);
    answers.push_back(std::move(event));
    answered.push_back(*decided);
    answer.record = std::move(*decided);
  }
  if (answered.empty()) return head;
  head = append_to_log(writer, answered, answers, config_.job_chunk_bytes);
  if (!head) return head;
  // Each answer's verdict is one of the last events appended, in order.
  std::uint64_t seq = *head - answers.size();
  for (Answer& answer : answering_) {
    if (answer.record) answer.seq = ++seq;
  }
  return head;
}

void Server::commit_now() {
  try {
    commit_turn();
  } catch (const store::StoreFull& e) {
    store_full(e.what());
  }
}

void Server::flush() {
  try {
    commit_turn();
    archive_finished();
    if (turn_durable_) store_.sync();
  } catch (const store::StoreFull& e) {
    store_full(e.what());
  }
  turn_durable_ = false;
  turn_writes_.clear();
  const auto written = store_.write_counts();
  metrics_.store_writes(written.commits, written.syncs);
  if (gauges_stale_) {
    metrics_.observe(scheduler_, store_full_.has_value());
    gauges_stale_ = false;
  }
  if (!socket_) return;  // the replies are the caller's (turn)
  for (auto& [route, frame] : outbox_) send_to(route, frame);
  outbox_.clear();
}

void Server::commit_turn() {
  if (!reconciling_.empty() && !write_turn()) {
    std::vector<Reconciliation> alone;
    alone.swap(reconciling_);
    for (Reconciliation& r : alone) reconcile_alone(r);
  }
  if (!pending_.empty()) {
    auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
      return append_records(writer, pending_, {});
    });
    if (!written) {
      throw Error(forktrial::ErrorCode::internal,
                  "cannot write the orchestration log: " + written.error().message);
    }
    if (config_.committed) config_.committed(pending_);
    pending_committed();
  }
}

void Server::archive_finished() {
  if (store_full_) return;
  const std::optional<JobId> job = scheduler_.job_to_archive(unarchivable_);
  if (!job) return;
  const std::optional<JobStatus> status = scheduler_.job_status(*job);
  const store::RunId run_id = archive_run_of(*job);
  const Instant now = clock_now();
  // The next piece, from what the store holds already (a restart may have
  // come between two pieces): each trial's state, specification and result.
  std::vector<store::NewEvent> events;
  std::uint64_t from = 0;
  {
    const auto snapshot = store_.snapshot();
    if (const auto run = snapshot.run(run_id)) from = run->head;
    const std::uint64_t to = std::min(status->trials, from + kArchiveTrialsPerTurn);
    // Which earlier trial holds each payload: carried from the piece before,
    // or gathered again (another job, or a restart between pieces).
    const auto payload_of = [&](std::uint64_t i) {
      return scheduler_.payload(TrialId{*job, static_cast<std::uint32_t>(i)});
    };
    if (!archiving_ || archiving_->job != *job || archiving_->next != from) {
      archiving_ = Archiving{*job, 0, {}};
      for (std::uint64_t i = 0; i < from; ++i)
        archiving_->first.emplace(payload_of(i), static_cast<std::uint32_t>(i));
    }
    for (std::uint64_t i = from; i < to; ++i) {
      const TrialId trial{*job, static_cast<std::uint32_t>(i)};
      const auto state = scheduler_.trial_state(trial);
      ArchivedTrial archived{trial.index,
                             state->status,
                             state->attempt,
                             state->worker.value_or(WorkerId("")),
                             state->reasons,
                             *scheduler_.trial_input(trial),
                             std::nullopt,
                             state->outcome,
                             {},
                             false};
      const auto [first, added] = archiving_->first.emplace(payload_of(i), trial.index);
      if (!added && scheduler_.trial_input(TrialId{*job, first->second}) == archived.input) {
        archived.input_of = first->second;
      }
      if (state->status == TrialStatus::reconciled) {
        if (auto stored = stored_result_text(trial, snapshot)) {
          archived.line = stored->line;
          archived.result = std::move(stored->text);
        }
      }
      events.push_back(archived_trial_event(archived, now));
    }
    archiving_->next = to;
  }
  const bool last = from + events.size() == status->trials;
  const std::array<OrchestrationRecord, 1> archived_record{JobArchived{*job, now}};
  auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
    if (!events.empty()) {
      if (!writer.run(run_id)) {
        auto created =
            writer.create_run(store::NewRun{.id = run_id, .label = "archive of job " + job->str()});
        if (!created) return std::unexpected(std::move(created.error()));
      }
      auto appended = writer.append(run_id, from, events);
      if (!appended) return appended;
    }
    if (!last) return 0;
    return append_to_log(writer, archived_record, {}, config_.job_chunk_bytes);
  });
  if (!written) {
    log_(LogLevel::error, "cannot archive job " + job->str() +
                              " (its trials stay in memory): " + written.error().message);
    unarchivable_.insert(*job);
    archiving_.reset();
    return;
  }
  if (!last) return;
  archiving_.reset();
  // Its records and results were copied whole: the scheduler and the
  // result index let them go.
  if (config_.committed) config_.committed(archived_record);
  scheduler_.replay(archived_record.front());
  result_seqs_.erase(job->str());
  gauges_stale_ = true;
}

std::string Server::busy_message() const {
  return "the coordinator's store is full (" + store_full_.value_or("") +
         "); it takes no writes until its disk has room: send this again later";
}

void Server::reply_busy(const std::string& route, std::uint64_t request) {
  reply_error(route, request, ErrorCode::unavailable, busy_message());
}

void Server::store_full(const std::string& why) {
  const bool already = store_full_.has_value();
  store_full_ = why;
  pending_.clear();
  answering_.clear();
  for (const Reconciliation& r : reconciling_) reply_busy(r.route, r.request);
  reconciling_.clear();
  std::vector<std::pair<std::string, std::string>> told;
  told.swap(outbox_);
  for (auto& [route, frame] : told) {
    auto decoded = wire::decode(frame, config_.max_frame_bytes);
    if (!decoded) continue;
    const auto envelope = decoded->envelope();
    const std::uint64_t request = envelope.getRequestId();
    if (envelope.which() != Envelope::ERROR && turn_writes_.contains({route, request})) {
      reply_busy(route, request);  // its answer told of a decision now undone
    } else if (request != 0 || envelope.which() == Envelope::ERROR) {
      outbox_.emplace_back(std::move(route), std::move(frame));  // a read, or an error
    }
    // A message of the coordinator's own (stop a trial) goes: the next
    // heartbeat names the stale trials again.
  }
  scheduler_ = Scheduler(config_.scheduler);
  archiving_.reset();  // it points into the scheduler's payloads
  replay_log();
  metrics_.undone();
  metrics_.resync(scheduler_);
  gauges_stale_ = true;
  // Every worker says hello again and keeps its leases, as after a restart.
  parked_.clear();
  for (const auto& [worker, route] : worker_routes_) peers_.erase(route);
  worker_routes_.clear();
  next_probe_ = world_.monotonic_now() + probe_wait_;
  last_full_log_ = world_.monotonic_now();
  log_(LogLevel::error,
       std::string(already ? "the store is still full" : "the store is full") + ": " + why +
           ". Paused: no leases, reconciliations or submissions until the disk holding " +
           config_.store.string() +
           " has room; nothing committed is lost, and running trials keep their leases");
}

void Server::probe_store() {
  const auto steady = world_.monotonic_now();
  if (steady < next_probe_) return;
  const std::uint64_t free = world_.free_bytes(config_.store).value_or(kResumeFreeBytes);
  if (free < kResumeFreeBytes) {
    next_probe_ = steady + std::chrono::seconds(1);
    if (steady - last_full_log_ >= kStillFullLog) {
      last_full_log_ = steady;
      log_(LogLevel::warn, "the store is still full (" + std::to_string(free) +
                               " bytes free on its disk); still paused");
    }
    return;
  }
  const std::string why = *store_full_;
  store_full_.reset();
  keep(scheduler_.recover(clock_now()));
  flush();
  if (store_full_) {
    probe_wait_ = std::min<std::chrono::seconds>(probe_wait_ * 2, kLongestProbe);
    next_probe_ = steady + probe_wait_;
    return;
  }
  probe_wait_ = std::chrono::seconds(1);
  log_(LogLevel::info, "the store has room again (" + std::to_string(free) +
                           " bytes free on its disk); resumed, every live lease renewed");
}

void Server::recover() {
  const std::uint64_t records = replay_log();
  metrics_.resync(scheduler_);
  keep(scheduler_.recover(clock_now()));
  flush();
  give_back_freed_memory();  // the log's text, read and decoded, is garbage now
  if (records > 0) {
    log_(LogLevel::info, "replayed " + std::to_string(records) + " orchestration records");
  }
}

std::uint64_t Server::replay_log() {
  auto snapshot = store_.snapshot();
  auto read = replay_setting_aside(
      snapshot,
      [&] {
        // Before each read of the log: nothing built from a read that met
        // a record set aside stays.
        activity_.clear();
        log_snapshot_ = LogSnapshot{};
        result_seqs_.clear();
        scheduler_ = Scheduler(config_.scheduler);
      },
      [&](OrchestrationRecord&& record) {
        // What a record set aside left here goes with the next read's restart.
        activity_.note(record);
        if (const auto* job = std::get_if<JobSubmitted>(&record)) note_job(*job);
        scheduler_.replay(std::move(record));  // after what reads it
      },
      [&](const store::EventView& event) {
        if (event.type == kSettledType || event.type == kVerdictType || event.type == kResultType) {
          remember_result(event);
        } else if (event.type == Activity::kFailuresType) {
          activity_.restore_failures(event.payload);
        } else if (auto marker = log_snapshot_of(event)) {
          log_snapshot_ = *marker;
        }
      });
  if (!read) {
    throw Error(forktrial::ErrorCode::internal,
                "the orchestration log does not replay: " + read.error().message +
                    "\n`forktrial store check --store " + config_.store.string() +
                    "` says what is wrong with the store");
  }
  set_aside_ = std::move(read->set_aside);
  for (const SetAside& record : set_aside_) {
    log_(LogLevel::warn, "set aside orchestration " + describe(record) +
                             ": the state the log's other records build goes on without it");
  }
  // A log that holds records set aside is compacted at the first turn: the
  // snapshot holds the state without them, and the next start reads no
  // record that does not apply.
  compact_at_ = set_aside_.empty() ? compaction_due(log_snapshot_) : 0;
  return read->records;
}

std::uint64_t Server::compaction_due(const LogSnapshot& snapshot) const {
  return snapshot.seq +
         std::max(config_.compact_log_after, config_.compact_log_ratio * snapshot.seq);
}

void Server::maybe_compact_log() {
  if (config_.compact_log_after == 0) return;
  std::uint64_t head = 0;
  try {
    const auto log = store_.snapshot().run(kOrchestrationRun);
    head = log ? log->head : 0;
  } catch (const store::ResizeBlocked&) {
    return;  // another process grew the map and it cannot follow yet: next turn
  }
  if (head < compact_at_) return;
  if (!compact_log_now(clock_now())) {
    // Not before the log has grown as much again.
    compact_at_ = head + compaction_due(log_snapshot_) - log_snapshot_.seq;
  }
}

std::vector<SetAside> Server::repair() {
  if (!compact_log_now(clock_now())) {
    throw Error(ErrorCode::internal,
                "the orchestration log of " + config_.store.string() +
                    " could not be compacted; the coordinator's log above says why");
  }
  return set_aside_;
}

bool Server::compact_log_now(Instant now) {
  const auto started = world_.monotonic_now();
  const Records snapshot = scheduler_.snapshot(now);
  // The results of reconciled trials of jobs not archived yet, which the
  // log holds and the snapshot's records do not: each copied as a
  // trial.verdict (or, of a log written before verdicts, trial.result)
  // event that remember_result reads as it reads the old ones.
  std::vector<store::NewEvent> results;
  std::vector<TrialId> result_trials;
  {
    const auto read = store_.snapshot();
    for (const JobStatus& job : scheduler_.jobs()) {
      if (job.archived || job.count(TrialStatus::reconciled) == 0) continue;
      scheduler_.visit_trials(job.id, [&](const TrialSummary& trial) {
        if (trial.status != TrialStatus::reconciled) return;
        const TrialId id{job.id, trial.index};
        auto stored = stored_result_text(id, read);
        if (!stored) return;
        store::NewEvent& event = results.emplace_back();
        event.type = std::string(stored->line ? kResultType : kVerdictType);
        if (stored->line) {
          event.payload = std::move(stored->text);
        } else {
          // A trial.verdict names its trial at its top; a trial.settled's
          // verdict does not.
          ordered_json verdict = ordered_json::parse(stored->text, nullptr, false);
          ordered_json doc{{"job", id.job.str()}, {"index", id.index}};
          if (verdict.is_object()) {
            for (auto& [key, value] : verdict.items()) {
              if (key != "job" && key != "index") doc[key] = std::move(value);
            }
          }
          event.payload = doc.dump();
        }
        event.timestamp = format_timestamp(now.time_since_epoch().count());
        event.actor = std::string(kCoordinatorActor);
        result_trials.push_back(id);
      });
    }
  }
  // The status page's recent failures, which the records held.
  store::NewEvent failures;
  failures.type = std::string(Activity::kFailuresType);
  failures.payload = activity_.failures_text();
  failures.timestamp = format_timestamp(now.time_since_epoch().count());
  failures.actor = std::string(kCoordinatorActor);
  results.push_back(std::move(failures));
  const std::uint64_t generation = log_snapshot_.generation + 1;
  std::optional<store::Result<LogSnapshot>> written;
  try {
    written = store_.write([&](store::Writer& writer) {
      return compact_log(writer, snapshot, results, generation, now, config_.job_chunk_bytes);
    });
  } catch (const store::StoreError& e) {
    // A full disk, say: nothing was written, and the log is whole.
    log_(LogLevel::warn,
         std::string("cannot compact the orchestration log (it stays as it is): ") + e.what());
    return false;
  }
  if (!*written) {
    log_(LogLevel::warn,
         "cannot compact the orchestration log (it stays as it is): " + written->error().message);
    return false;
  }
  const LogSnapshot& done = **written;
  // The results now sit just before the failures and the log.snapshot
  // event, in order.
  for (auto& [job, seqs] : result_seqs_) std::ranges::fill(seqs, 0);
  const std::uint64_t first = done.seq - results.size();
  for (std::size_t i = 0; i < result_trials.size(); ++i) {
    remember_result(result_trials[i], first + i);
  }
  log_snapshot_ = done;
  compact_at_ = compaction_due(done);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(world_.monotonic_now() - started);
  log_(LogLevel::info,
       "compacted the orchestration log: its " + std::to_string(done.replaced_events) +
           " events are a snapshot of " + std::to_string(done.seq) + " (generation " +
           std::to_string(done.generation) + ", " + std::to_string(took.count()) + " ms)");
  return true;
}

void Server::note_job(const JobSubmitted& job) {
  result_seqs_[job.job.str()].assign(job.trials.size(), 0);
}

}  // namespace forktrial::coordinator::detail
