// The coordinator's clients' writes: submissions (whole or in parts),
// cancellations, and the blobs they upload or workers fetch.
#include "coordinator/server_impl.h"

namespace forktrial::coordinator::detail {

void Server::on_fetch(const std::string& route, Envelope::Reader envelope) {
  auto fetch = envelope.getFetchBlob();
  auto digest = wire::digest_of(fetch.getDigest());
  if (!digest) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::invalid_argument, "not a digest");
  }
  auto snapshot = store_.snapshot();
  auto blob = snapshot.blob(*digest);
  if (!blob) {
    return reply_error(route, envelope.getRequestId(), ErrorCode::not_found,
                       "no blob " + digest->str() + " in the coordinator's store");
  }
  const std::uint64_t offset = std::min<std::uint64_t>(fetch.getOffset(), blob->size());
  const std::uint64_t length = std::min<std::uint64_t>(
      {fetch.getLength(), schema::wire::K_MAX_CHUNK_BYTES, blob->size() - offset});
  wire::MessageBuilder message;
  auto chunk = wire::start(message, envelope.getRequestId()).initBlobChunk();
  wire::set_digest(chunk.initDigest(), *digest);
  chunk.setTotalSize(blob->size());
  chunk.setOffset(offset);
  metrics_.blob_bytes(BlobDirection::served, length);
  chunk.setBytes(
      capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(blob->data()) + offset, length));
  reply(route, wire::encode(message));
}

void Server::on_find_missing(const std::string& route, Envelope::Reader envelope) {
  std::vector<Digest> wanted;
  for (auto d : envelope.getFindMissing().getDigests()) {
    if (auto digest = wire::digest_of(d)) wanted.push_back(*digest);
  }
  // Touched: a blob the client is told it need not upload stays for gc's
  // grace (coordinator/retention.h), time for the submission naming it.
  auto missing = store_.touch_blobs(wanted);
  wire::MessageBuilder message;
  auto list = wire::start(message, envelope.getRequestId())
                  .initMissing()
                  .initDigests(static_cast<unsigned>(missing.size()));
  for (unsigned i = 0; i < missing.size(); ++i) wire::set_digest(list[i], missing[i]);
  reply(route, wire::encode(message));
}

void Server::on_put_blob(const std::string& route, Envelope::Reader envelope, Instant now) {
  auto chunk = envelope.getPutBlob();
  auto digest = wire::digest_of(chunk.getDigest());
  const std::uint64_t request = envelope.getRequestId();
  if (!digest) return reply_error(route, request, ErrorCode::invalid_argument, "not a digest");
  auto bytes = chunk.getBytes();
  // A client is its key, with keys: a client opening many connections
  // still has one share of the spool.
  const std::string client = client_ ? "key " + client_->key : "connection " + route;
  auto added = uploads_.add(client, *digest, chunk.getTotalSize(), chunk.getOffset(),
                            std::as_bytes(std::span(bytes.begin(), bytes.size())), now);
  if (!added) {
    return reply_error(route, request, added.error());
  }
  metrics_.blob_bytes(BlobDirection::uploaded, bytes.size());
  if (const auto& whole = *added) {
    // Stored from its file, never held in memory; the file goes either way.
    struct Remove {
      UploadSpool& spool;
      const std::filesystem::path& file;
      ~Remove() { spool.done(file); }
    } remove{uploads_, *whole};
    store_.put_blob_file(*whole);
  }
  reply_ok(route, request);
}

void Server::on_submit(const std::string& route, Envelope::Reader envelope, Instant now) {
  auto job = envelope.getSubmitJob();
  const std::uint64_t request = envelope.getRequestId();
  JobSubmission submission;
  submission.priority = job.getPriority();
  submission.name = wire::text(job.getName());
  // The name is shown to every client and on the status page.
  if (auto bad = named_text_problem("the job's name", submission.name, kMaxJobNameBytes)) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       *bad + "; name the job with plain text");
  }
  if (const std::string keep = wire::text(job.getKeepForks()); !keep.empty()) {
    const auto parsed = parse_keep_forks(keep);
    const std::uint64_t after = job.getKeepForksAfterMillis();
    if (!parsed || after > kMaxKeepForksAfter) {
      return reply_error(
          route, request, ErrorCode::invalid_argument,
          !parsed ? "keepForks \"" + bounded_text(keep, 64) +
                        "\" is not a retention; give all, failures or none"
                  : "keepForksAfterMillis " + std::to_string(after) + " is past 100 years");
    }
    submission.retention = RetentionPolicy{*parsed, Duration(static_cast<Duration::rep>(after))};
  }
  char id[32];
  if (const std::string token = wire::text(job.getToken()); !token.empty()) {
    // The client named the submission: sent again (its answer was lost),
    // it is answered with the job it made, which is not made twice.
    const bool hex = token.size() == 16 && std::all_of(token.begin(), token.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex) {
      return reply_error(route, request, ErrorCode::invalid_argument,
                         "a submission token is 16 lowercase hex digits");
    }
    std::snprintf(id, sizeof id, "job_%s", token.c_str());
    if (auto existing = scheduler_.job_status(JobId(id))) {
      // Sent again: in parts, any part of a job already made is answered
      // as its last was.
      const bool same_size = job.getParts() > 1 || existing->trials == job.getSpecs().size();
      if (!same_size || existing->name != submission.name) {
        return reply_error(route, request, ErrorCode::conflict,
                           std::string("token ") + token + " already names job " + id + " (\"" +
                               existing->name + "\", " + std::to_string(existing->trials) +
                               " trials); a new submission needs a new token");
      }
      wire::MessageBuilder message;
      auto accepted = wire::start(message, request).initJobAccepted();
      accepted.setJob(id);
      accepted.setTotal(existing->trials);
      return reply(route, wire::encode(message));
    }
  } else if (job.getParts() > 1) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       "a submission in parts needs a token to name it");
  } else {
    std::snprintf(id, sizeof id, "job_%016llx", static_cast<unsigned long long>(world_.random64()));
  }
  submission.id = JobId(id);
  // A job in parts: each part is checked as it comes and held until the
  // last, which makes the job (PendingJob).
  PendingJob* pending = nullptr;
  if (job.getParts() > 1) {
    const std::uint32_t part = job.getPart(), parts = job.getParts();
    auto found = pending_jobs_.find(id);
    if (part == 0 && found != pending_jobs_.end() && found->second.next > 0) {
      // Started again from its first part: what came before is dropped.
      pending_jobs_.erase(found);
      found = pending_jobs_.end();
    }
    if (found == pending_jobs_.end()) {
      if (part != 0) {
        return reply_error(route, request, ErrorCode::failed_precondition,
                           "part " + std::to_string(part) + " of job " + id +
                               " came before its part 0 (or after the job was dropped, idle "
                               "for 60 s): send the job again from part 0");
      }
      if (pending_jobs_.size() >= kMaxPendingJobs) {
        return reply_error(route, request, ErrorCode::unavailable,
                           "too many jobs are being submitted in parts at once; send this "
                           "again later");
      }
      found = pending_jobs_
                  .emplace(id, PendingJob{submission.name,
                                          submission.priority,
                                          parts,
                                          client_ ? client_->key : "",
                                          0,
                                          {},
                                          now,
                                          0})
                  .first;
    }
    pending = &found->second;
    if (pending->parts != parts || pending->name != submission.name ||
        pending->owner != (client_ ? client_->key : "") || part >= parts) {
      return reply_error(route, request, ErrorCode::conflict,
                         "part " + std::to_string(part) + " of " + std::to_string(parts) +
                             " does not belong to job " + id + ", which is being submitted in " +
                             std::to_string(pending->parts) + " parts under another name or key");
    }
    if (part < pending->next) return reply_ok(route, request);  // sent again
    if (part > pending->next) {
      return reply_error(route, request, ErrorCode::failed_precondition,
                         "part " + std::to_string(part) + " of job " + id + " came before part " +
                             std::to_string(pending->next));
    }
    pending->last = now;
  }
  const std::size_t held = pending == nullptr ? 0 : pending->inputs.size();
  // A flood of submissions is refused before it is parsed or recorded: the
  // queue, kept in memory and replayed at every start, stays bounded.
  if (const std::size_t queued = scheduler_.queued_trials() + pending_trials();
      queued + job.getSpecs().size() > config_.max_queued) {
    if (pending != nullptr) pending_jobs_.erase(id);
    return reply_error(route, request, ErrorCode::resource_exhausted,
                       "the coordinator's queue is full: it holds " + std::to_string(queued) +
                           " queued trials, and " + std::to_string(job.getSpecs().size()) +
                           " more would pass its limit of " + std::to_string(config_.max_queued) +
                           " (--max-queued); submit again when some have run, or in smaller "
                           "jobs");
  }
  // The same in bytes, overall and for this client: what the job's texts
  // would add to what the jobs not archived and the jobs arriving in parts
  // hold.
  {
    std::uint64_t incoming = 0;
    for (auto text : job.getSpecs()) incoming += text.size();
    const std::string owner = client_ ? client_->key : "";
    const std::uint64_t held_in_all = scheduler_.held_payload_bytes() + pending_bytes();
    const std::uint64_t held_by_client =
        scheduler_.held_payload_bytes(owner) + pending_bytes(std::string_view(owner));
    const auto refuse = [&](std::uint64_t holding, std::uint64_t limit, const std::string& whose,
                            const char* option) {
      if (pending != nullptr) pending_jobs_.erase(id);
      return reply_error(route, request, ErrorCode::resource_exhausted,
                         whose + " jobs not yet finished and archived hold " +
                             std::to_string(holding) + " bytes of trial text, and this job's " +
                             std::to_string(incoming) + " more would pass the limit of " +
                             std::to_string(limit) + " (" + option +
                             "); submit again when some have finished, or in smaller jobs");
    };
    if (held_by_client + incoming > config_.max_client_bytes) {
      return refuse(held_by_client, config_.max_client_bytes,
                    zap_ ? std::string("this client's") : std::string("the"), "--max-client-bytes");
    }
    if (held_in_all + incoming > config_.max_queued_bytes) {
      return refuse(held_in_all, config_.max_queued_bytes, "the coordinator's",
                    "--max-queued-bytes");
    }
  }
  // Each distinct problem once, with the first trial it was found in and
  // how many trials share it (a bad bundle or parent would otherwise be
  // listed once per trial of the matrix).
  std::map<std::string, std::pair<std::size_t, std::size_t>> problems;  // -> (first, count)
  std::vector<std::string> problem_order;
  auto problem = [&](std::size_t index, const std::string& message) {
    auto [it, added] = problems.try_emplace(message, index, 0);
    ++it->second.second;
    if (added) problem_order.push_back(message);
  };
  // Each distinct fork point once: found in the snapshot now, its segment
  // stored only once the whole part is accepted, so that a refused
  // submission leaves nothing in the store.
  using PointKey = std::pair<std::string, std::string>;  // (parent, at)
  std::map<PointKey, std::expected<std::uint64_t, Status>> points;
  std::map<std::pair<Digest, Digest>, CheckedBundle> checked_bundles;
  std::vector<TrialInput> inputs;
  // What each input's segment and cache key are made of, until the
  // segments are stored.
  struct Unsealed {
    PointKey point;
    std::shared_ptr<const ParsedSpec> parsed;  // set when its result may be cached
  };
  std::vector<Unsealed> unsealed;
  auto snapshot = store_.snapshot();
  std::size_t index = held;
  for (auto text : job.getSpecs()) {
    const std::size_t trial = index++;
    // Refused by its size before it is copied or parsed: a parse costs
    // several times a text's bytes, and no rule-abiding trial comes near.
    if (text.size() > kMaxTrialBytes) {
      problem(trial, "a trial's text is " + std::to_string(text.size()) + " bytes; at most " +
                         std::to_string(kMaxTrialBytes) +
                         " are taken (a label is at most 1024 bytes, an id 250)");
      continue;
    }
    auto submitted = read_payload(wire::text(text), specs_);
    if (!submitted) {
      problem(trial, submitted.error().message);
      continue;
    }
    TrialInput input;
    bool deterministic = false;
    const auto& spec = submitted->spec();
    // The wall clock bounds an attempt's lease (Scheduler::request_work).
    input.run_limit =
        Duration{static_cast<Duration::rep>(std::ceil(spec.limits.wall_clock_seconds * 1000))};
    for (const auto* pack : sandbox::packs_in_load_order(spec)) {
      auto archive = wire::archive_of_root(pack->root_dir);
      if (!archive || !pack->expected_bundle_hash) {
        problem(trial, "pack " + pack->root_dir + " is not a pinned bundle");
        continue;
      }
      const CheckedBundle& checked =
          check_bundle(snapshot, *archive, *pack->expected_bundle_hash, checked_bundles);
      if (checked.problem) problem(trial, *checked.problem);
      // The candidate comes last: its pack's executor is the trial's, and
      // its manifest says whether its results may be reused.
      input.executor = checked.executor;
      deterministic = checked.deterministic;
      input.bundles.push_back(*archive);
    }
    // What forktrial's Lua child needs, once the candidate is known to be Lua.
    if (input.executor == pack::Executor::lua) {
      if (auto bad = sandbox::lua_limits_problem(spec.limits)) problem(trial, *bad);
    }
    const PointKey key{spec.parent_run_id.str(), spec.at_event.str()};
    auto point = points.find(key);
    if (point == points.end()) point = points.emplace(key, fork_point_of(snapshot, spec)).first;
    if (!point->second) {
      problem(trial, point->second.error().message);
      continue;
    }
    unsealed.push_back(
        Unsealed{key, deterministic && !job.getNoCache() ? submitted->parsed : nullptr});
    input.payload = payload_of(submitted->candidate, submitted->spec_json());
    inputs.push_back(std::move(input));
  }
  if (!problems.empty()) {
    constexpr std::size_t kListed = 20;
    std::string message = "the job was not submitted:";
    for (std::size_t n = 0; n < problem_order.size() && n < kListed; ++n) {
      const auto& [first, count] = problems[problem_order[n]];
      message += "\n  trial " + std::to_string(first) +
                 (count > 1 ? " (and " + std::to_string(count - 1) + " more)" : "") + ": " +
                 problem_order[n];
    }
    if (problem_order.size() > kListed) {
      message += "\n  and " + std::to_string(problem_order.size() - kListed) + " more problems";
    }
    if (pending != nullptr) pending_jobs_.erase(id);
    return reply_error(route, request, ErrorCode::invalid_argument, message);
  }
  // Accepted: the segments of its fork points, in one transaction, and
  // with them each trial's segment and cache key.
  std::map<PointKey, Digest> sealed;
  auto stored = store_.write([&](store::Writer& writer) -> store::Result<std::size_t> {
    sealed.clear();
    for (const auto& [key, seq] : points) {
      auto digest = writer.store_segment(store::RunId(key.first), *seq);
      if (!digest) return std::unexpected(std::move(digest.error()));
      sealed.emplace(key, *digest);
    }
    return sealed.size();
  });
  if (!stored) {
    if (pending != nullptr) pending_jobs_.erase(id);
    return reply_error(route, request, stored.error());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TrialInput& input = inputs[i];
    input.segment = sealed.at(unsealed[i].point);
    if (unsealed[i].parsed) {
      input.cache_key = trial_cache_key(cache_runtime(), input.executor, unsealed[i].parsed->spec,
                                        input.segment, input.bundles, client_ ? client_->key : "");
    }
  }
  if (pending != nullptr) {
    for (const TrialInput& input : inputs) pending->bytes += input.payload.size();
    pending->inputs.insert(pending->inputs.end(), std::make_move_iterator(inputs.begin()),
                           std::make_move_iterator(inputs.end()));
    if (++pending->next < pending->parts) return reply_ok(route, request);
    inputs = std::move(pending->inputs);
    pending_jobs_.erase(id);
  }
  // Every blob the job names is touched before the job is recorded, so gc,
  // which deletes only blobs untouched for its grace, cannot take one the
  // job is about to need; one it took since the checks (an earlier part's,
  // or between the snapshot and now) refuses the job.
  std::vector<Digest> named;
  for (const TrialInput& input : inputs) {
    named.push_back(input.segment);
    named.insert(named.end(), input.bundles.begin(), input.bundles.end());
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  if (const auto gone = store_.touch_blobs(named); !gone.empty()) {
    return reply_error(route, request, ErrorCode::failed_precondition,
                       "blob " + gone.front().str() +
                           (gone.size() > 1 ? " (and " + std::to_string(gone.size() - 1) + " more)"
                                            : std::string()) +
                           " was collected by gc while job " + id +
                           " was being submitted; upload its bundles again (findMissing) and "
                           "submit again");
  }
  const std::size_t total = inputs.size();
  drop_repeated_keys(inputs);
  submission.trials = std::move(inputs);
  submission.owner = client_ ? client_->key : "";
  auto records = scheduler_.submit(std::move(submission), now);
  if (!records) return reply_error(route, request, records.error());
  for (const auto& record : *records) {
    if (const auto* submitted = std::get_if<JobSubmitted>(&record)) note_job(*submitted);
  }
  keep(std::move(*records));
  note_cache_candidates(JobId(id));
  turn_durable_ = true;
  // The trials the result cache may answer are answered now, in the commit
  // that records the job: nothing else of this turn (a worker's offer that
  // follows, a waiting worker's parked offer at its end) may lease one first.
  if (!answering_.empty()) commit_now();
  trim_ = true;
  log_(LogLevel::info,
       std::string("job ") + id + " submitted with " + std::to_string(total) + " trials");
  wire::MessageBuilder message;
  auto accepted = wire::start(message, request).initJobAccepted();
  accepted.setJob(id);
  accepted.setTotal(total);
  reply(route, wire::encode(message));
}

const Server::CheckedBundle& Server::check_bundle(
    const store::Snapshot& snapshot, const Digest& archive, const Digest& pin,
    std::map<std::pair<Digest, Digest>, CheckedBundle>& checked) {
  const auto key = std::make_pair(archive, pin);
  if (auto done = checked.find(key); done != checked.end()) return done->second;
  CheckedBundle result;
  std::optional<std::string>& problem = result.problem;
  auto blob = snapshot.blob(archive);
  if (!blob) {
    problem = "bundle " + archive.str() + " was not uploaded";
  } else {
    auto summary = pack::check_archive(
        std::string_view(reinterpret_cast<const char*>(blob->data()), blob->size()));
    if (!summary) {
      problem = "bundle " + archive.str() + " is not a pack archive: " + summary.error().message;
    } else if (summary->bundle_hash != pin) {
      problem = "bundle " + archive.str() + " holds a pack that hashes to " +
                summary->bundle_hash.str() + ", not to its pin " + pin.str();
    } else {
      result.executor = summary->executor;
      result.deterministic = summary->deterministic;
    }
  }
  return checked.emplace(key, std::move(result)).first->second;
}

std::expected<std::uint64_t, Status> Server::fork_point_of(
    const store::Snapshot& snapshot, const sandbox::TrialSpecification& spec) {
  auto parent = snapshot.run(spec.parent_run_id);
  if (!parent || !may_fork(*parent)) {
    return failure(ErrorCode::not_found, no_run_to_fork(spec.parent_run_id.str()));
  }
  auto point = snapshot.find_event(*parent, spec.at_event);
  if (!point) {
    return failure(ErrorCode::not_found, "no event " + spec.at_event.str() +
                                             " in the history of run " + spec.parent_run_id.str());
  }
  return point->seq;
}

std::string Server::cache_runtime() const {
  return config_.runtime_version.empty() ? std::string("forktrial ") + FORKTRIAL_VERSION
                                         : config_.runtime_version;
}

void Server::drop_repeated_keys(std::vector<TrialInput>& inputs) {
  std::map<Digest, std::size_t> seen;
  for (const TrialInput& input : inputs) {
    if (input.cache_key) ++seen[*input.cache_key];
  }
  for (TrialInput& input : inputs) {
    if (input.cache_key && seen[*input.cache_key] > 1) input.cache_key.reset();
  }
}

void Server::note_cache_candidates(const JobId& job) {
  const auto status = scheduler_.job_status(job);
  for (std::uint32_t i = 0; status && i < status->trials; ++i) {
    const TrialId trial{job, i};
    if (const auto key = scheduler_.cache_key(trial)) answering_.push_back(Answer{trial, *key});
  }
}

void Server::on_cancel(const std::string& route, Envelope::Reader envelope, Instant now) {
  const JobId job(wire::text(envelope.getCancelJob().getJob()));
  if (auto status = scheduler_.job_status(job); status && !may_act_on(*status)) {
    log_(LogLevel::warn, "refused to cancel job " + job.str() +
                             " for a client key that "
                             "neither submitted it nor is an administrator's");
    return refuse_not_theirs(route, envelope.getRequestId(), job.str(), "cancel");
  }
  auto cancelled = scheduler_.cancel(job, now);
  if (!cancelled) {
    return reply_error(route, envelope.getRequestId(), cancelled.error());
  }
  keep(std::move(cancelled->records));
  turn_durable_ = true;
  std::map<std::string, std::vector<AttemptRef>> stops;
  for (const auto& running : cancelled->running) {
    auto worker_route = worker_routes_.find(running.worker);
    if (worker_route == worker_routes_.end()) continue;
    stops[worker_route->second].push_back({running.trial, running.attempt});
  }
  for (const auto& [worker_route, trials] : stops) send_stop(worker_route, trials);
  log_(LogLevel::info, "job " + job.str() + " cancelled; " +
                           std::to_string(cancelled->running.size()) +
                           " running trials told to stop");
  reply_json(route, envelope.getRequestId(), status_json(*scheduler_.job_status(job), clock_now()),
             false);
}

std::size_t Server::pending_trials() const {
  std::size_t trials = 0;
  for (const auto& [id, job] : pending_jobs_) trials += job.inputs.size();
  return trials;
}

std::uint64_t Server::pending_bytes(std::optional<std::string_view> owner) const {
  std::uint64_t bytes = 0;
  for (const auto& [id, job] : pending_jobs_) {
    if (!owner || job.owner == *owner) bytes += job.bytes;
  }
  return bytes;
}

}  // namespace forktrial::coordinator::detail
