#include "coordinator/scheduler.h"

#include <algorithm>
#include <compare>
#include <cstring>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "base/timestamp.h"

namespace forktrial::coordinator {

std::string_view trial_status_name(TrialStatus status) {
  switch (status) {
    case TrialStatus::queued:
      return "queued";
    case TrialStatus::leased:
      return "leased";
    case TrialStatus::reported:
      return "reported";
    case TrialStatus::reconciled:
      return "reconciled";
    case TrialStatus::cancelled:
      return "cancelled";
    case TrialStatus::abandoned:
      return "abandoned";
  }
  return "?";
}

std::optional<TrialStatus> parse_trial_status(std::string_view name) {
  for (std::size_t i = 0; i < kTrialStatusCount; ++i) {
    const auto status = static_cast<TrialStatus>(i);
    if (trial_status_name(status) == name) return status;
  }
  return std::nullopt;
}

std::string_view report_verdict_name(ReportVerdict verdict) {
  switch (verdict) {
    case ReportVerdict::accepted:
      return "accepted";
    case ReportVerdict::fenced:
      return "fenced";
    case ReportVerdict::duplicate:
      return "duplicate";
    case ReportVerdict::unknown:
      return "unknown";
  }
  return "?";
}

namespace {

// Trials that reached a final status, of the counts of a job by status.
std::uint64_t done_of(const std::array<std::uint64_t, kTrialStatusCount>& counts) {
  return counts[static_cast<std::size_t>(TrialStatus::reconciled)] +
         counts[static_cast<std::size_t>(TrialStatus::cancelled)] +
         counts[static_cast<std::size_t>(TrialStatus::abandoned)];
}

}  // namespace

std::uint64_t JobStatus::done() const {
  return done_of(counts);
}

std::string_view JobStatus::state() const {
  if (cancelled) return "cancelled";
  if (finished()) return count(TrialStatus::abandoned) > 0 ? "abandoned" : "finished";
  const bool started = count(TrialStatus::queued) < trials || failed_attempts > 0;
  return started ? "running" : "queued";
}

namespace {

// The state refers to jobs, workers and digests by their position in a
// table: four bytes instead of a string in every index.
using JobIx = std::uint32_t;
using WorkerIx = std::uint32_t;
using DigestIx = std::uint32_t;
constexpr WorkerIx kNoWorker = std::numeric_limits<WorkerIx>::max();
// The most distinct payloads of a job looked up at once for sharing.
constexpr std::size_t kSharedPayloads = 4096;

struct TrialKey {
  JobIx job = 0;
  std::uint32_t index = 0;
  friend auto operator<=>(const TrialKey&, const TrialKey&) = default;
};

struct Trial {
  // As submitted. Trials of a job with the same payload (a matrix's repeats)
  // share one copy.
  std::shared_ptr<const std::string> payload;
  std::vector<DigestIx> digests;     // the segment's, then the bundles'
  std::vector<std::string> reasons;  // of each failed attempt
  Instant lease_expires{};           // while leased
  Instant lease_deadline{};          // while leased: when it ends, renewed or not (epoch: never)
  Duration run_limit{0};
  pack::Executor executor = pack::Executor::lua;
  WorkerIx worker = kNoWorker;  // the holder of the last lease
  Attempt attempt = 1;          // the live or next attempt
  Attempt leased_attempt = 0;   // the last attempt leased; 0: none
  TrialStatus status = TrialStatus::queued;
  std::optional<Outcome> outcome;   // once reconciled
  std::optional<Digest> cache_key;  // as submitted: its result may be cached
};

// The queued trials of a job that one executor runs.
struct Queue {
  // By index (oldest first), and by each digest they need.
  std::set<std::uint32_t> trials;
  std::map<DigestIx, std::set<std::uint32_t>> by_digest;
  // Its place in the executor's round of the job's priority, while it holds
  // trials: the lower, the sooner served.
  std::optional<std::uint64_t> turn;
};

std::size_t executor_ix(pack::Executor executor) {
  return static_cast<std::size_t>(executor);
}

// The executors of a worker, one bit each.
using ExecutorSet = std::uint8_t;
constexpr ExecutorSet bit_of(pack::Executor executor) {
  return static_cast<ExecutorSet>(1U << static_cast<unsigned>(executor));
}

struct Job {
  JobId id;
  std::string name;
  int priority = 0;
  bool cancelled = false;
  std::vector<Trial> trials;
  std::array<Queue, pack::kExecutorCount> queues;
  std::array<std::uint64_t, kTrialStatusCount> counts{};
  std::array<std::uint64_t, kOutcomes.size()> outcomes{};
  std::uint64_t failed_attempts = 0;
  std::uint64_t fenced_reports = 0;
  std::uint64_t cached = 0;  // trials answered from the result cache
  Instant submitted_at{};
  std::string owner;                         // the submitting client's key; "" without keys
  std::optional<RetentionPolicy> retention;  // its own, as submitted
  std::optional<Instant> finished_at;        // when its last trial reached a final status
  std::uint64_t trial_count = 0;             // its trials, archived or not
  bool archived = false;                     // its trials are in its archive, not here
  std::uint64_t payload_bytes = 0;           // its trials' payloads held, shared ones once
};

struct Worker {
  WorkerId id;
  bool alive = false;
  std::uint32_t slots = 0;
  std::uint32_t prefetch = 0;
  ExecutorSet executors = bit_of(pack::Executor::lua);
  Instant last_seen{};
  std::set<DigestIx> cached;
  std::set<TrialKey> leases;
};

struct DigestHash {
  std::size_t operator()(const Digest& digest) const noexcept {
    std::size_t hash = 0;
    std::memcpy(&hash, digest.bytes().data(), sizeof hash);
    return hash;
  }
};

std::string text_of(Instant instant) {
  return format_timestamp(instant.time_since_epoch().count());
}

template <typename Record>
[[noreturn]] void does_not_apply(const Record&, const std::string& why) {
  throw RecordDoesNotApply(Record::kType, why);
}

}  // namespace

struct Scheduler::State {
  SchedulerConfig config;

  std::vector<Job> jobs;
  std::map<JobId, JobIx> job_by_id;
  // The bytes of the payloads jobs not archived hold, in all and by owner.
  std::uint64_t held_bytes = 0;
  std::map<std::string, std::uint64_t, std::less<>> held_bytes_by_owner;
  std::vector<Worker> workers;
  std::map<WorkerId, WorkerIx> worker_by_id;
  std::vector<Digest> digests;
  std::unordered_map<Digest, DigestIx, DigestHash> digest_by_value;

  // Per executor, per priority (highest first), the jobs with trials queued
  // for that executor in the order of their turns: the first is served
  // next, then goes to the back of each round it is in. A worker offering
  // several executors is served the job whose turn came first among theirs.
  using Round = std::set<std::pair<std::uint64_t, JobIx>>;
  std::array<std::map<int, Round, std::greater<>>, pack::kExecutorCount> rounds;
  std::uint64_t turns = 0;  // the next turn given
  // Live workers offering each executor.
  std::array<std::size_t, pack::kExecutorCount> offering{};
  // Live leases by expiry, live workers by when they were last heard of.
  std::set<std::pair<Instant, TrialKey>> lease_expiries;
  std::set<std::pair<Instant, WorkerIx>> last_heard;
  std::set<TrialKey> reported;  // reported, not yet reconciled
  // The trials answered from the result cache, of jobs not archived: the
  // trial whose result each reused.
  std::map<TrialKey, TrialId> cached_from;
  std::size_t queued = 0;
  std::set<JobIx> to_archive;  // finished, not yet archived

  // ---- Look-ups.

  std::optional<TrialKey> find(const TrialId& id) const {
    const auto job = job_by_id.find(id.job);
    if (job == job_by_id.end() || id.index >= jobs[job->second].trials.size()) return {};
    return TrialKey{job->second, id.index};
  }
  std::optional<WorkerIx> find(const WorkerId& id) const {
    const auto worker = worker_by_id.find(id);
    if (worker == worker_by_id.end()) return {};
    return worker->second;
  }
  std::optional<WorkerIx> find_alive(const WorkerId& id) const {
    const auto worker = find(id);
    if (!worker || !workers[*worker].alive) return {};
    return worker;
  }
  Trial& trial(TrialKey key) { return jobs[key.job].trials[key.index]; }
  const Trial& trial(TrialKey key) const { return jobs[key.job].trials[key.index]; }
  TrialId id_of(TrialKey key) const { return TrialId{jobs[key.job].id, key.index}; }

  template <typename Record>
  TrialKey require_trial(const Record& record) const {
    const auto key = find(record.trial);
    if (!key) does_not_apply(record, "no trial " + record.trial.str());
    return *key;
  }
  template <typename Record>
  WorkerIx require_alive(const Record& record) const {
    const auto worker = find_alive(record.worker);
    if (!worker) does_not_apply(record, "no live worker " + record.worker.str());
    return *worker;
  }
  // The trial is `status` (or `other`) at `record.attempt`.
  template <typename Record>
  void require_status(const Record& record, TrialKey key, TrialStatus status,
                      std::optional<TrialStatus> other = {}) const {
    const Trial& t = trial(key);
    if ((t.status != status && t.status != other) || t.attempt != record.attempt) {
      does_not_apply(record, record.trial.str() + " is " +
                                 std::string(trial_status_name(t.status)) + " at attempt " +
                                 std::to_string(t.attempt) + ", not " +
                                 std::string(trial_status_name(status)) + " at attempt " +
                                 std::to_string(record.attempt));
    }
  }

  DigestIx intern(const Digest& digest) {
    const auto [it, added] =
        digest_by_value.try_emplace(digest, static_cast<DigestIx>(digests.size()));
    if (added) digests.push_back(digest);
    return it->second;
  }

  // ---- The queue and the rounds.

  void set_status(TrialKey key, TrialStatus status) {
    Job& job = jobs[key.job];
    Trial& t = job.trials[key.index];
    --job.counts[static_cast<std::size_t>(t.status)];
    ++job.counts[static_cast<std::size_t>(status)];
    if (t.status == TrialStatus::reported) reported.erase(key);
    if (status == TrialStatus::reported) reported.insert(key);
    t.status = status;
  }

  void enqueue(TrialKey key) {
    Job& job = jobs[key.job];
    const Trial& t = job.trials[key.index];
    const std::size_t e = executor_ix(t.executor);
    Queue& queue = job.queues[e];
    queue.trials.insert(key.index);
    for (const DigestIx digest : t.digests) queue.by_digest[digest].insert(key.index);
    ++queued;
    if (!queue.turn) {
      queue.turn = turns++;
      rounds[e][job.priority].insert({*queue.turn, key.job});
    }
  }

  void dequeue(TrialKey key) {
    Job& job = jobs[key.job];
    const Trial& t = job.trials[key.index];
    const std::size_t e = executor_ix(t.executor);
    Queue& queue = job.queues[e];
    queue.trials.erase(key.index);
    for (const DigestIx digest : t.digests) {
      const auto queued_here = queue.by_digest.find(digest);
      if (queued_here == queue.by_digest.end()) continue;
      queued_here->second.erase(key.index);
      if (queued_here->second.empty()) queue.by_digest.erase(queued_here);
    }
    --queued;
    if (queue.trials.empty()) leave_round(key.job, e);
  }

  void leave_round(JobIx index, std::size_t e) {
    Job& job = jobs[index];
    Queue& queue = job.queues[e];
    if (!queue.turn) return;
    const auto round = rounds[e].find(job.priority);
    round->second.erase({*queue.turn, index});
    if (round->second.empty()) rounds[e].erase(round);
    queue.turn.reset();
  }

  // The job's turn is over: it goes to the back of each round it is in.
  void end_turn(JobIx index) {
    Job& job = jobs[index];
    for (std::size_t e = 0; e < job.queues.size(); ++e) {
      Queue& queue = job.queues[e];
      if (!queue.turn) continue;
      Round& round = rounds[e].at(job.priority);
      round.erase({*queue.turn, index});
      queue.turn = turns++;
      round.insert({*queue.turn, index});
    }
  }

  // The job to serve the worker next: the first in turn among the fronts of
  // the highest-priority rounds of the executors it offers.
  std::optional<JobIx> next_job(const Worker& worker) const {
    std::optional<std::tuple<int, std::uint64_t, JobIx>> best;
    for (std::size_t e = 0; e < rounds.size(); ++e) {
      if ((worker.executors & bit_of(pack::kExecutors[e])) == 0 || rounds[e].empty()) continue;
      const auto& [priority, round] = *rounds[e].begin();
      const auto [turn, job] = *round.begin();
      if (!best || priority > std::get<0>(*best) ||
          (priority == std::get<0>(*best) && turn < std::get<1>(*best))) {
        best = {priority, turn, job};
      }
    }
    if (!best) return std::nullopt;
    return std::get<2>(*best);
  }

  void end_lease(TrialKey key) {
    Trial& t = trial(key);
    lease_expiries.erase({t.lease_expires, key});
    workers[t.worker].leases.erase(key);
  }

  // ---- apply: the one place the state changes.

  void apply(const OrchestrationRecord& record) {
    std::visit([this](const auto& r) { apply_one(r); }, record);
  }
  // A record nobody reads after: a job's payloads move into the state.
  void apply(OrchestrationRecord&& record) {
    std::visit([this](auto&& r) { apply_one(std::move(r)); }, std::move(record));
  }

  void apply_one(const JobSubmitted& r) {
    add_job(r, [](const TrialInput& input) { return input.payload; });
  }
  void apply_one(JobSubmitted&& r) {
    add_job(r, [](TrialInput& input) { return std::move(input.payload); });
  }

  // `payload_of(input)` gives each trial's payload, copied or moved.
  template <typename Record, typename PayloadOf>
  void add_job(Record& r, PayloadOf payload_of) {
    const JobIx index = new_job(r);
    Job& job = jobs[index];
    job.trials.resize(r.trials.size());
    job.trial_count = r.trials.size();
    std::unordered_map<std::string_view, std::shared_ptr<const std::string>> shared;
    for (std::size_t i = 0; i < r.trials.size(); ++i) {
      Trial& t = job.trials[i];
      if (auto same = shared.find(r.trials[i].payload); same != shared.end()) {
        t.payload = same->second;
      } else {
        // Bounded: a job of distinct payloads shares nothing, and keeps no
        // table of them.
        if (shared.size() >= kSharedPayloads) shared.clear();
        t.payload = std::make_shared<const std::string>(payload_of(r.trials[i]));
        shared.emplace(*t.payload, t.payload);
        job.payload_bytes += t.payload->size();
      }
      t.run_limit = r.trials[i].run_limit;
      t.executor = r.trials[i].executor;
      t.cache_key = r.trials[i].cache_key;
      t.digests.reserve(1 + r.trials[i].bundles.size());
      t.digests.push_back(intern(r.trials[i].segment));
      for (const Digest& bundle : r.trials[i].bundles) t.digests.push_back(intern(bundle));
    }
    held_bytes += job.payload_bytes;
    held_bytes_by_owner[job.owner] += job.payload_bytes;
    job.counts[static_cast<std::size_t>(TrialStatus::queued)] = r.trials.size();
    job.submitted_at = r.at;
    for (std::uint32_t i = 0; i < r.trials.size(); ++i) enqueue({index, i});
    note_finished(index, r.at);
  }

  // A job of the record's id, name, priority, owner and retention, at the
  // end of the table; the id must be new.
  template <typename Record>
  JobIx new_job(const Record& r) {
    if (job_by_id.contains(r.job)) does_not_apply(r, "job " + r.job.str() + " exists");
    const auto index = static_cast<JobIx>(jobs.size());
    Job& job = jobs.emplace_back();
    job_by_id.emplace(r.job, index);
    job.id = r.job;
    job.name = r.name;
    job.priority = r.priority;
    job.owner = r.owner;
    job.retention = r.retention;
    return index;
  }

  // The job's finishing time is the time of the record that left none of
  // its trials queued, leased or reported.
  void note_finished(JobIx index, Instant at) {
    Job& job = jobs[index];
    if (!job.finished_at && done_of(job.counts) == job.trial_count) {
      job.finished_at = at;
      to_archive.insert(index);
    }
  }

  void apply_one(const JobCancelled& r) {
    const auto found = job_by_id.find(r.job);
    if (found == job_by_id.end()) does_not_apply(r, "no job " + r.job.str());
    const JobIx index = found->second;
    if (jobs[index].cancelled) does_not_apply(r, "job " + r.job.str() + " is cancelled");
    if (jobs[index].archived) does_not_apply(r, "job " + r.job.str() + " is archived");
    jobs[index].cancelled = true;
    for (std::uint32_t i = 0; i < jobs[index].trials.size(); ++i) {
      const TrialKey key{index, i};
      const TrialStatus status = trial(key).status;
      if (status == TrialStatus::queued) {
        dequeue(key);
      } else if (status == TrialStatus::leased) {
        end_lease(key);
      } else {
        continue;
      }
      set_status(key, TrialStatus::cancelled);
    }
    note_finished(index, r.at);
  }

  void apply_one(const WorkerJoined& r) {
    auto index = find(r.worker);
    if (index && workers[*index].alive) {
      does_not_apply(r, "worker " + r.worker.str() + " is alive");
    }
    if (!index) {
      index = static_cast<WorkerIx>(workers.size());
      workers.emplace_back().id = r.worker;
      worker_by_id.emplace(r.worker, *index);
    }
    Worker& worker = workers[*index];
    worker.alive = true;
    worker.slots = r.slots;
    worker.prefetch = r.prefetch;
    worker.executors = 0;
    for (const pack::Executor executor : r.executors) worker.executors |= bit_of(executor);
    for (const pack::Executor executor : pack::kExecutors) {
      if ((worker.executors & bit_of(executor)) != 0) ++offering[executor_ix(executor)];
    }
    worker.last_seen = r.at;
    worker.cached.clear();
    for (const Digest& digest : r.cached) worker.cached.insert(intern(digest));
    last_heard.insert({r.at, *index});
  }

  void apply_one(const WorkerLost& r) {
    const WorkerIx index = require_alive(r);
    Worker& worker = workers[index];
    if (!worker.leases.empty()) {
      does_not_apply(r, "worker " + r.worker.str() + " still holds " +
                            std::to_string(worker.leases.size()) + " leases");
    }
    worker.alive = false;
    for (const pack::Executor executor : pack::kExecutors) {
      if ((worker.executors & bit_of(executor)) != 0) --offering[executor_ix(executor)];
    }
    last_heard.erase({worker.last_seen, index});
  }

  void apply_one(const LeasesRenewed& r) {
    const WorkerIx index = require_alive(r);
    Worker& worker = workers[index];
    last_heard.erase({worker.last_seen, index});
    worker.last_seen = r.at;
    last_heard.insert({r.at, index});
    for (const AttemptRef& renewed : r.renewed) {
      const auto key = find(renewed.trial);
      if (!key || !worker.leases.contains(*key) || trial(*key).attempt != renewed.attempt) {
        does_not_apply(r, "worker " + r.worker.str() + " holds no lease of " + renewed.trial.str() +
                              " attempt " + std::to_string(renewed.attempt));
      }
      Trial& t = trial(*key);
      lease_expiries.erase({t.lease_expires, *key});
      t.lease_expires = bounded_expiry(r.expires, t.lease_deadline);
      lease_expiries.insert({t.lease_expires, *key});
    }
  }

  // A lease's expiry as renewed, never past its deadline.
  static Instant bounded_expiry(Instant expires, Instant deadline) {
    return deadline == Instant{} ? expires : std::min(expires, deadline);
  }

  void apply_one(const TrialLeased& r) {
    const TrialKey key = require_trial(r);
    require_status(r, key, TrialStatus::queued);
    const WorkerIx index = require_alive(r);
    dequeue(key);
    end_turn(key.job);
    set_status(key, TrialStatus::leased);
    Trial& t = trial(key);
    t.worker = index;
    t.leased_attempt = r.attempt;
    t.lease_deadline = r.deadline;
    t.lease_expires = bounded_expiry(r.expires, r.deadline);
    lease_expiries.insert({t.lease_expires, key});
    Worker& worker = workers[index];
    worker.leases.insert(key);
    worker.cached.insert(t.digests.begin(), t.digests.end());
  }

  // A requeue or an abandonment: the attempt is over, leased or reported.
  template <typename Record>
  void end_attempt(const Record& r, TrialKey key) {
    require_status(r, key, TrialStatus::leased, TrialStatus::reported);
    if (trial(key).status == TrialStatus::leased) end_lease(key);
    ++jobs[key.job].failed_attempts;
  }

  void apply_one(const TrialRequeued& r) {
    const TrialKey key = require_trial(r);
    end_attempt(r, key);
    Trial& t = trial(key);
    t.reasons.push_back(r.reason);
    ++t.attempt;
    set_status(key, TrialStatus::queued);
    enqueue(key);
  }

  void apply_one(const TrialAbandoned& r) {
    const TrialKey key = require_trial(r);
    end_attempt(r, key);
    trial(key).reasons = r.reasons;
    set_status(key, TrialStatus::abandoned);
    note_finished(key.job, r.at);
  }

  void apply_one(const TrialReported& r) {
    const TrialKey key = require_trial(r);
    require_status(r, key, TrialStatus::leased);
    const WorkerIx index = require_alive(r);
    if (trial(key).worker != index) {
      does_not_apply(r, r.trial.str() + " is not leased to " + r.worker.str());
    }
    end_lease(key);
    set_status(key, TrialStatus::reported);
  }

  void apply_one(const TrialFenced& r) {
    // The trials of an archived job are gone; its counts stay.
    const auto job = job_by_id.find(r.trial.job);
    if (job != job_by_id.end() && jobs[job->second].archived &&
        r.trial.index < jobs[job->second].trial_count) {
      ++jobs[job->second].fenced_reports;
      return;
    }
    ++jobs[require_trial(r).job].fenced_reports;
  }

  void apply_one(const TrialReconciled& r) {
    const TrialKey key = require_trial(r);
    require_status(r, key, TrialStatus::reported);
    set_status(key, TrialStatus::reconciled);
    trial(key).outcome = r.outcome;
    ++jobs[key.job].outcomes[static_cast<std::size_t>(r.outcome)];
    note_finished(key.job, r.at);
  }

  void apply_one(const TrialCached& r) {
    const TrialKey key = require_trial(r);
    require_status(r, key, TrialStatus::queued);
    if (trial(key).leased_attempt != 0) {
      does_not_apply(r, r.trial.str() + " was leased before");
    }
    dequeue(key);
    set_status(key, TrialStatus::reconciled);
    trial(key).outcome = r.outcome;
    Job& job = jobs[key.job];
    ++job.outcomes[static_cast<std::size_t>(r.outcome)];
    ++job.cached;
    cached_from.insert_or_assign(key, r.source);
    note_finished(key.job, r.at);
  }

  void apply_one(const JobArchived& r) {
    const auto found = job_by_id.find(r.job);
    if (found == job_by_id.end()) does_not_apply(r, "no job " + r.job.str());
    Job& job = jobs[found->second];
    if (job.archived) does_not_apply(r, "job " + r.job.str() + " is archived");
    if (!job.finished_at) does_not_apply(r, "job " + r.job.str() + " has not finished");
    // A finished job holds no lease, no queued trial, no report: nothing
    // outside its trials refers to them.
    job.archived = true;
    held_bytes -= job.payload_bytes;
    if (auto owner = held_bytes_by_owner.find(job.owner); owner != held_bytes_by_owner.end()) {
      owner->second -= job.payload_bytes;
      if (owner->second == 0) held_bytes_by_owner.erase(owner);
    }
    job.payload_bytes = 0;
    cached_from.erase(cached_from.lower_bound(TrialKey{found->second, 0}),
                      cached_from.upper_bound(
                          TrialKey{found->second, std::numeric_limits<std::uint32_t>::max()}));
    std::vector<Trial>().swap(job.trials);
    to_archive.erase(found->second);
  }

  // ---- A snapshot's records.

  void apply_one(const JobSummary& r) {
    std::uint64_t total = 0;
    for (const std::uint64_t count : r.counts) total += count;
    if (total != r.trials || done_of(r.counts) != r.trials) {
      does_not_apply(r, "job " + r.job.str() + " counts " + std::to_string(total) +
                            " trials, of which " + std::to_string(done_of(r.counts)) +
                            " are done, not all its " + std::to_string(r.trials));
    }
    Job& job = jobs[new_job(r)];
    job.cancelled = r.cancelled;
    job.trial_count = r.trials;
    job.counts = r.counts;
    job.outcomes = r.outcomes;
    job.failed_attempts = r.failed_attempts;
    job.fenced_reports = r.fenced_reports;
    job.submitted_at = r.submitted_at;
    job.finished_at = r.finished_at;
    job.cached = r.cached;
    job.archived = true;
  }

  void apply_one(const TrialRestored& r) {
    const TrialKey key = require_trial(r);
    Trial& t = trial(key);
    if (t.status != TrialStatus::queued || t.attempt != 1 || t.leased_attempt != 0 ||
        t.worker != kNoWorker || !t.reasons.empty()) {
      does_not_apply(r, r.trial.str() + " is not as submitted");
    }
    if (r.attempt == 0 || r.leased_attempt > r.attempt ||
        (r.status == TrialStatus::reconciled) != r.outcome.has_value() ||
        (r.status == TrialStatus::leased && !r.worker)) {
      does_not_apply(r, r.trial.str() + " is " + std::string(trial_status_name(r.status)) +
                            " at attempt " + std::to_string(r.attempt) + " after lease " +
                            std::to_string(r.leased_attempt) + ", which no history leaves");
    }
    WorkerIx holder = kNoWorker;
    if (r.worker) {
      const auto found = r.status == TrialStatus::leased ? find_alive(*r.worker) : find(*r.worker);
      if (!found) does_not_apply(r, "no such worker " + r.worker->str() + " for " + r.trial.str());
      holder = *found;
    }
    t.attempt = r.attempt;
    t.leased_attempt = r.leased_attempt;
    t.worker = holder;
    t.reasons = r.reasons;
    if (r.status == TrialStatus::queued) return;
    dequeue(key);
    set_status(key, r.status);
    if (r.status == TrialStatus::leased) {
      t.lease_deadline = r.deadline;
      t.lease_expires = r.expires;
      lease_expiries.insert({t.lease_expires, key});
      workers[holder].leases.insert(key);
    }
    if (r.outcome) {
      t.outcome = r.outcome;
      ++jobs[key.job].outcomes[static_cast<std::size_t>(*r.outcome)];
    }
  }

  void apply_one(const JobRestored& r) {
    const auto found = job_by_id.find(r.job);
    if (found == job_by_id.end()) does_not_apply(r, "no job " + r.job.str());
    Job& job = jobs[found->second];
    if (job.archived) does_not_apply(r, "job " + r.job.str() + " is archived");
    if (r.finished_at.has_value() != (done_of(job.counts) == job.trial_count)) {
      does_not_apply(r, "job " + r.job.str() + " has " +
                            std::to_string(job.trial_count - done_of(job.counts)) +
                            " trials to finish, and is said " +
                            (r.finished_at ? "finished" : "unfinished"));
    }
    job.cancelled = r.cancelled;
    job.failed_attempts = r.failed_attempts;
    job.fenced_reports = r.fenced_reports;
    job.finished_at = r.finished_at;
    if (r.finished_at) {
      to_archive.insert(found->second);
    } else {
      to_archive.erase(found->second);
    }
  }

  // The state as records that rebuild it in a fresh Scheduler: the live
  // workers (and the lost ones a trial still names), then every job in the
  // order it came: an archived one as its summary, another as submitted,
  // its trials that moved on, and its counts.
  Records snapshot(Instant at) const {
    Records out;
    std::vector<bool> named(workers.size(), false);
    for (const Job& job : jobs) {
      for (const Trial& t : job.trials) {
        if (t.worker != kNoWorker) named[t.worker] = true;
      }
    }
    for (WorkerIx index = 0; index < workers.size(); ++index) {
      const Worker& worker = workers[index];
      if (!worker.alive && !named[index]) continue;
      WorkerJoined joined{worker.id, worker.slots, worker.prefetch, {}, worker.last_seen, {}};
      for (const pack::Executor executor : pack::kExecutors) {
        if ((worker.executors & bit_of(executor)) != 0) joined.executors.push_back(executor);
      }
      if (worker.alive) {
        for (const DigestIx digest : worker.cached) joined.cached.push_back(digests[digest]);
      }
      out.emplace_back(std::move(joined));
      if (!worker.alive) out.emplace_back(WorkerLost{worker.id, "lost before the snapshot", at});
    }
    for (JobIx index = 0; index < jobs.size(); ++index) {
      const Job& job = jobs[index];
      if (job.archived) {
        out.emplace_back(JobSummary{job.id, job.priority, job.name, job.owner, job.retention,
                                    job.cancelled, job.trial_count, job.counts, job.outcomes,
                                    job.failed_attempts, job.fenced_reports, job.submitted_at,
                                    job.finished_at.value_or(Instant{}), at, job.cached});
        continue;
      }
      JobSubmitted submitted{job.id,           job.priority, job.name,     {},
                             job.submitted_at, job.owner,    job.retention};
      submitted.trials.reserve(job.trials.size());
      for (const Trial& t : job.trials) submitted.trials.push_back(input_of(t));
      out.emplace_back(std::move(submitted));
      for (std::uint32_t i = 0; i < job.trials.size(); ++i) {
        const Trial& t = job.trials[i];
        if (t.status == TrialStatus::queued && t.attempt == 1 && t.leased_attempt == 0 &&
            t.worker == kNoWorker && t.reasons.empty()) {
          continue;
        }
        // A trial answered from the result cache is answered so again.
        if (const auto source = cached_from.find(TrialKey{index, i}); source != cached_from.end()) {
          out.emplace_back(TrialCached{TrialId{job.id, i}, t.attempt, source->second,
                                       t.outcome.value_or(Outcome::completed), at});
          continue;
        }
        const bool leased = t.status == TrialStatus::leased;
        out.emplace_back(TrialRestored{
            TrialId{job.id, i}, t.status, t.attempt, t.leased_attempt,
            t.worker == kNoWorker ? std::nullopt : std::optional(workers[t.worker].id),
            leased ? t.lease_expires : Instant{}, leased ? t.lease_deadline : Instant{}, t.reasons,
            t.outcome, at});
      }
      out.emplace_back(JobRestored{job.id, job.cancelled, job.failed_attempts, job.fenced_reports,
                                   job.finished_at, at});
    }
    return out;
  }

  TrialInput input_of(const Trial& t) const {
    TrialInput input{*t.payload, digests[t.digests.front()], {}, t.run_limit, t.executor,
                     t.cache_key};
    for (std::size_t i = 1; i < t.digests.size(); ++i)
      input.bundles.push_back(digests[t.digests[i]]);
    return input;
  }

  // Applies the record and hands it to the caller: every decision ends here.
  void record(Records& out, OrchestrationRecord r) {
    apply(r);
    out.push_back(std::move(r));
  }

  // ---- Decisions.

  // The attempt ended without a report the store kept: requeued, or
  // abandoned when it was the last.
  void fail_attempt(TrialKey key, const std::string& reason, Instant now, Records& out) {
    const Trial& t = trial(key);
    if (t.attempt >= config.max_attempts) {
      std::vector<std::string> reasons = t.reasons;
      reasons.push_back(reason);
      record(out, TrialAbandoned{id_of(key), t.attempt, std::move(reasons), now});
    } else {
      record(out, TrialRequeued{id_of(key), t.attempt, reason, now});
    }
  }

  void lose_worker(WorkerIx index, const std::string& reason, Instant now, Records& out) {
    const Worker& worker = workers[index];
    const std::string why = "worker " + worker.id.str() + " lost: " + reason;
    const std::set<TrialKey> leases = worker.leases;  // fail_attempt ends them
    for (const TrialKey key : leases) fail_attempt(key, why, now, out);
    record(out, WorkerLost{worker.id, reason, now});
  }

  std::size_t affinity(const Trial& t, const Worker& worker) const {
    return static_cast<std::size_t>(std::ranges::count_if(
        t.digests, [&worker](DigestIx digest) { return worker.cached.contains(digest); }));
  }

  // The queued trial of the job to lease to the worker, among those of the
  // executors it offers: the one holding most of its digests in the
  // worker's cache, the oldest among equals, looking at the oldest queued
  // trial and at the oldest one for each of at most kAffinityProbes digests
  // the worker and the queue have in common, going through the smaller of
  // the two sets. The job has a trial the worker can run (next_job).
  std::uint32_t pick(const Job& job, const Worker& worker) const {
    std::optional<std::uint32_t> best;
    std::size_t best_score = 0;
    bool complete = false;
    const auto consider = [&](std::uint32_t candidate) {
      const std::size_t score = affinity(job.trials[candidate], worker);
      if (!best || score > best_score || (score == best_score && candidate < *best)) {
        best = candidate;
        best_score = score;
        complete = score == job.trials[candidate].digests.size();
      }
    };
    std::size_t probes = 0;
    for (std::size_t e = 0; e < job.queues.size(); ++e) {
      const Queue& queue = job.queues[e];
      if ((worker.executors & bit_of(pack::kExecutors[e])) == 0 || queue.trials.empty()) continue;
      consider(*queue.trials.begin());
      if (worker.cached.size() <= queue.by_digest.size()) {
        for (const DigestIx digest : worker.cached) {
          if (complete || probes == kAffinityProbes) break;
          ++probes;
          const auto queued_here = queue.by_digest.find(digest);
          if (queued_here != queue.by_digest.end()) consider(*queued_here->second.begin());
        }
      } else {
        for (const auto& [digest, queued_here] : queue.by_digest) {
          if (complete || probes == kAffinityProbes) break;
          ++probes;
          if (worker.cached.contains(digest)) consider(*queued_here.begin());
        }
      }
    }
    return *best;
  }

  // How a report of (trial, attempt) from the worker is to be taken.
  std::pair<ReportVerdict, std::string> judge(const WorkerId& worker, const TrialId& id,
                                              Attempt attempt) const {
    const auto key = find(id);
    if (!key) {
      const auto job = job_by_id.find(id.job);
      // A trial of an archived job was reconciled once and for all: a
      // report that still arrives is a lost attempt's, late.
      if (job != job_by_id.end() && jobs[job->second].archived &&
          id.index < jobs[job->second].trial_count) {
        return {ReportVerdict::fenced, id.str() + " attempt " + std::to_string(attempt) +
                                           " came after job " + id.job.str() +
                                           " finished: its results stand"};
      }
      return {ReportVerdict::unknown, "there is no trial " + id.str()};
    }
    const Trial& t = trial(*key);
    const std::string which = id.str() + " attempt " + std::to_string(attempt);
    if (attempt == 0 || attempt > t.leased_attempt) {
      return {ReportVerdict::unknown, which + " was never leased"};
    }
    if (attempt < t.attempt) {
      return {ReportVerdict::fenced,
              which + " is superseded by attempt " + std::to_string(t.attempt)};
    }
    const WorkerId& holder = workers[t.worker].id;
    if (holder != worker) {
      return {ReportVerdict::fenced,
              which + " is leased to " + holder.str() + ", not to " + worker.str()};
    }
    switch (t.status) {
      case TrialStatus::leased:
        return {ReportVerdict::accepted, ""};
      case TrialStatus::reported:
      case TrialStatus::reconciled:
        return {ReportVerdict::duplicate, which + " was reported before"};
      case TrialStatus::cancelled:
        return {ReportVerdict::fenced, which + " was cancelled with job " + id.job.str()};
      case TrialStatus::abandoned:
        return {ReportVerdict::fenced, which + " was abandoned"};
      case TrialStatus::queued:
        break;
    }
    return {ReportVerdict::unknown, which + " is queued"};
  }

  // A report or failure judged, and recorded when fenced.
  ReportResult judged(const WorkerId& worker, const TrialId& id, Attempt attempt, Instant now) {
    ReportResult result;
    std::tie(result.verdict, result.reason) = judge(worker, id, attempt);
    if (result.verdict == ReportVerdict::fenced) {
      record(result.records, TrialFenced{id, attempt, worker, result.reason, now});
    }
    return result;
  }

  std::expected<TrialKey, Status> reported_trial(const TrialId& id) const {
    const auto key = find(id);
    if (!key) return std::unexpected(Status{ErrorCode::not_found, "no trial " + id.str()});
    return *key;
  }

  Status not_reported(const TrialId& id, const Trial& t) const {
    return Status{ErrorCode::failed_precondition,
                  id.str() + " is " + std::string(trial_status_name(t.status)) + ", not reported"};
  }

  JobStatus status_of(const Job& job) const {
    JobStatus status{
        job.id,          job.name,     job.priority,        job.cancelled,      job.trial_count,
        job.counts,      job.outcomes, job.failed_attempts, job.fenced_reports, job.submitted_at,
        job.finished_at, job.owner,    job.retention};
    for (std::size_t e = 0; e < job.queues.size(); ++e) {
      status.queued_by_executor[e] = job.queues[e].trials.size();
    }
    status.archived = job.archived;
    status.cached = job.cached;
    return status;
  }

  // The status of every entry of `table`, in the order of their ids.
  template <typename Id, typename Entry>
  auto statuses(const std::map<Id, std::uint32_t>& by_id, const std::vector<Entry>& table) const {
    std::vector<decltype(status_of(table.front()))> all;
    for (const auto& [id, index] : by_id) all.push_back(status_of(table[index]));
    return all;
  }

  WorkerStatus status_of(const Worker& worker) const {
    WorkerStatus status{worker.id,
                        worker.alive,
                        worker.slots,
                        worker.prefetch,
                        static_cast<std::uint32_t>(worker.leases.size()),
                        worker.last_seen,
                        worker.cached.size()};
    for (const pack::Executor executor : pack::kExecutors) {
      if ((worker.executors & bit_of(executor)) != 0) status.executors.push_back(executor);
    }
    return status;
  }
};

Scheduler::Scheduler(SchedulerConfig config) : state_(std::make_unique<State>()) {
  if (config.lease_duration <= Duration::zero() || config.worker_timeout <= Duration::zero() ||
      config.max_attempts == 0) {
    throw Error(ErrorCode::invalid_argument,
                "scheduler configuration: lease_duration (" +
                    std::to_string(config.lease_duration.count()) + " ms), worker_timeout (" +
                    std::to_string(config.worker_timeout.count()) + " ms) and max_attempts (" +
                    std::to_string(config.max_attempts) + ") must all be positive");
  }
  state_->config = config;
}
Scheduler::~Scheduler() = default;
Scheduler::Scheduler(Scheduler&&) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&&) noexcept = default;

std::expected<Records, Status> Scheduler::submit(JobSubmission job, Instant now) {
  if (job.id.empty()) {
    return std::unexpected(Status{ErrorCode::invalid_argument, "a job needs an id"});
  }
  if (state_->job_by_id.contains(job.id)) {
    return std::unexpected(
        Status{ErrorCode::conflict, "job " + job.id.str() + " was submitted before"});
  }
  if (job.trials.size() > std::numeric_limits<std::uint32_t>::max()) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument, "job " + job.id.str() + " has " +
                                                std::to_string(job.trials.size()) +
                                                " trials; a job holds at most 4294967295"});
  }
  Records out;
  state_->record(
      out, JobSubmitted{std::move(job.id), job.priority, std::move(job.name), std::move(job.trials),
                        now, std::move(job.owner), job.retention});
  return out;
}

std::expected<CancelResult, Status> Scheduler::cancel(const JobId& job, Instant now) {
  const auto found = state_->job_by_id.find(job);
  if (found == state_->job_by_id.end()) {
    return std::unexpected(Status{ErrorCode::not_found, "no job " + job.str()});
  }
  CancelResult result;
  const Job& cancelled = state_->jobs[found->second];
  if (cancelled.cancelled) return result;
  if (cancelled.finished_at) {
    return std::unexpected(
        Status{ErrorCode::conflict, "job " + job.str() + " has finished (every trial " +
                                        "reconciled or abandoned): there is nothing to cancel, "
                                        "and its results stand"});
  }
  for (std::uint32_t i = 0; i < cancelled.trials.size(); ++i) {
    const Trial& t = cancelled.trials[i];
    if (t.status == TrialStatus::leased) {
      result.running.push_back({state_->workers[t.worker].id, TrialId{job, i}, t.attempt});
    }
  }
  state_->record(result.records, JobCancelled{job, now});
  return result;
}

std::expected<Records, Status> Scheduler::worker_joined(WorkerHello hello, Instant now) {
  if (hello.id.empty()) {
    return std::unexpected(Status{ErrorCode::invalid_argument, "a worker needs an id"});
  }
  if (hello.slots == 0) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument, "worker " + hello.id.str() + " offers no slots"});
  }
  if (hello.slots > state_->config.max_worker_slots) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument,
               "worker " + hello.id.str() + " offers " + std::to_string(hello.slots) +
                   " slots; this coordinator takes at most " +
                   std::to_string(state_->config.max_worker_slots) +
                   " a worker (give a smaller --slots, or start the coordinator with a larger "
                   "--max-worker-slots)"});
  }
  if (hello.executors.empty()) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument,
               "worker " + hello.id.str() +
                   " offers no executor this coordinator knows (lua, activegraph); a worker "
                   "offers lua whatever its --python"});
  }
  if (hello.prefetch > kMaxPrefetch) {
    return std::unexpected(Status{ErrorCode::invalid_argument,
                                  "worker " + hello.id.str() + " asks to prefetch " +
                                      std::to_string(hello.prefetch) + " assignments; at most " +
                                      std::to_string(kMaxPrefetch) +
                                      " (give a smaller --prefetch)"});
  }
  Records out;
  if (const auto previous = state_->find_alive(hello.id)) {
    state_->lose_worker(*previous, "it joined again, so what it ran before is gone", now, out);
  }
  // Once each, in their order: the record says what the worker offers.
  std::vector<pack::Executor> executors;
  for (const pack::Executor executor : pack::kExecutors) {
    if (std::ranges::find(hello.executors, executor) != hello.executors.end()) {
      executors.push_back(executor);
    }
  }
  state_->record(out, WorkerJoined{std::move(hello.id), hello.slots, hello.prefetch,
                                   std::move(hello.cached), now, std::move(executors)});
  return out;
}

namespace {

// failed_precondition: the worker must say hello again (on the wire, what
// makes it do so).
Status not_alive(const WorkerId& worker) {
  return Status{ErrorCode::failed_precondition,
                "worker " + worker.str() + " has not joined, or was lost; it must join again"};
}

}  // namespace

std::expected<HeartbeatResult, Status> Scheduler::heartbeat(const WorkerId& worker,
                                                            std::span<const AttemptRef> running,
                                                            Instant now) {
  const auto index = state_->find_alive(worker);
  if (!index) return std::unexpected(not_alive(worker));
  HeartbeatResult result;
  LeasesRenewed renewal{worker, {}, now + state_->config.lease_duration, now};
  for (const AttemptRef& entry : running) {
    const auto key = state_->find(entry.trial);
    const bool live = key && state_->workers[*index].leases.contains(*key) &&
                      state_->trial(*key).attempt == entry.attempt;
    (live ? renewal.renewed : result.stale).push_back(entry);
  }
  state_->apply(OrchestrationRecord{std::move(renewal)});  // liveness: in memory only
  return result;
}

Records Scheduler::worker_lost(const WorkerId& worker, const std::string& reason, Instant now) {
  Records out;
  if (const auto index = state_->find_alive(worker)) state_->lose_worker(*index, reason, now, out);
  return out;
}

std::expected<WorkResult, Status> Scheduler::request_work(const WorkerId& worker,
                                                          std::uint32_t free_slots, Instant now) {
  const auto index = state_->find_alive(worker);
  if (!index) return std::unexpected(not_alive(worker));
  const Worker& w = state_->workers[*index];
  const std::size_t held = w.leases.size();
  const std::size_t room = std::size_t{w.slots} + w.prefetch;
  std::size_t wanted = std::min<std::size_t>(free_slots, room > held ? room - held : 0);
  WorkResult result;
  for (; wanted > 0; --wanted) {
    const std::optional<JobIx> next = state_->next_job(w);
    if (!next) break;
    const JobIx job = *next;
    const std::uint32_t chosen = state_->pick(state_->jobs[job], w);
    const TrialKey key{job, chosen};
    const Assignment assignment{state_->id_of(key), state_->trial(key).attempt,
                                now + state_->config.lease_duration};
    // Trials queued on the worker before this one, beyond its slots, each
    // run before it starts: a slot's worth of them per run limit.
    const std::size_t ahead =
        w.leases.size() < w.slots ? 0 : (w.leases.size() - w.slots) / w.slots + 1;
    const Duration run_limit = state_->trial(key).run_limit;
    const Instant deadline = run_limit.count() == 0
                                 ? Instant{}
                                 : now + 2 * state_->config.lease_duration +
                                       run_limit * static_cast<Duration::rep>(ahead + 1);
    state_->record(result.records, TrialLeased{assignment.trial, assignment.attempt, worker,
                                               assignment.expires, now, deadline});
    result.assignments.push_back(assignment);
  }
  return result;
}

Records Scheduler::tick(Instant now) {
  State& s = *state_;
  Records out;
  while (!s.last_heard.empty() && s.last_heard.begin()->first + s.config.worker_timeout <= now) {
    const auto [last_seen, worker] = *s.last_heard.begin();
    s.lose_worker(worker, "not heard of since " + text_of(last_seen), now, out);
  }
  while (!s.lease_expiries.empty() && s.lease_expiries.begin()->first <= now) {
    const auto [expires, key] = *s.lease_expiries.begin();
    const Trial& t = s.trial(key);
    const std::string holder = "worker " + s.workers[t.worker].id.str();
    s.fail_attempt(key,
                   expires == t.lease_deadline
                       ? holder + " held it to its deadline " + text_of(expires) +
                             " without reporting (its run limit of " +
                             std::to_string(t.run_limit.count()) +
                             " ms, and a lease each to start it and to report); heartbeats do "
                             "not extend an attempt past it"
                       : "lease on " + holder + " expired at " + text_of(expires),
                   now, out);
  }
  return out;
}

ReportResult Scheduler::on_report(const WorkerId& worker, const TrialId& trial, Attempt attempt,
                                  Instant now) {
  ReportResult result = state_->judged(worker, trial, attempt, now);
  if (result.verdict == ReportVerdict::accepted) {
    state_->record(result.records, TrialReported{trial, attempt, worker, now});
  }
  return result;
}

ReportResult Scheduler::attempt_failed(const WorkerId& worker, const TrialId& trial,
                                       Attempt attempt, const std::string& reason, Instant now) {
  ReportResult result = state_->judged(worker, trial, attempt, now);
  if (result.verdict == ReportVerdict::accepted) {
    state_->fail_attempt(*state_->find(trial), "worker " + worker.str() + " failed: " + reason, now,
                         result.records);
  }
  return result;
}

std::expected<Records, Status> Scheduler::reconciled(const TrialId& trial, Outcome outcome,
                                                     Instant now) {
  const auto key = state_->reported_trial(trial);
  if (!key) return std::unexpected(key.error());
  const Trial& t = state_->trial(*key);
  Records out;
  if (t.status == TrialStatus::reconciled) return out;
  if (t.status != TrialStatus::reported) return std::unexpected(state_->not_reported(trial, t));
  state_->record(out, TrialReconciled{trial, t.attempt, outcome, now});
  return out;
}

std::expected<Records, Status> Scheduler::cached(const TrialId& trial, const TrialId& source,
                                                 Outcome outcome, Instant now) {
  auto answer = cache_answer(trial, source, outcome, now);
  if (!answer) return std::unexpected(std::move(answer.error()));
  Records out;
  state_->record(out, std::move(*answer));
  return out;
}

std::expected<TrialCached, Status> Scheduler::cache_answer(const TrialId& trial,
                                                           const TrialId& source, Outcome outcome,
                                                           Instant now) const {
  const auto key = state_->find(trial);
  if (!key) return failure(ErrorCode::not_found, "no trial " + trial.str());
  const Trial& t = state_->trial(*key);
  if (t.status != TrialStatus::queued || t.leased_attempt != 0) {
    return failure(ErrorCode::failed_precondition,
                   trial.str() + " is " + std::string(trial_status_name(t.status)) +
                       (t.leased_attempt != 0 ? " and was leased before" : "") +
                       ": only a trial never leased is answered from the cache");
  }
  if (source == trial) {
    return failure(ErrorCode::invalid_argument, trial.str() + " cannot be its own source");
  }
  return TrialCached{trial, t.attempt, source, outcome, now};
}

std::expected<Records, Status> Scheduler::reconcile_failed(const TrialId& trial,
                                                           const std::string& reason, Instant now) {
  const auto key = state_->reported_trial(trial);
  if (!key) return std::unexpected(key.error());
  const Trial& t = state_->trial(*key);
  if (t.status != TrialStatus::reported) return std::unexpected(state_->not_reported(trial, t));
  Records out;
  state_->fail_attempt(*key, "reconciliation failed: " + reason, now, out);
  return out;
}

void Scheduler::replay(const OrchestrationRecord& record) {
  state_->apply(record);
}

void Scheduler::replay(OrchestrationRecord&& record) {
  state_->apply(std::move(record));
}

Records Scheduler::snapshot(Instant at) const {
  return state_->snapshot(at);
}

Records Scheduler::recover(Instant now) {
  State& s = *state_;
  Records out;
  for (const Worker& worker : s.workers) {
    if (!worker.alive) continue;
    LeasesRenewed renewal{worker.id, {}, now + s.config.lease_duration, now};
    for (const TrialKey key : worker.leases) {
      renewal.renewed.push_back({s.id_of(key), s.trial(key).attempt});
    }
    s.apply(OrchestrationRecord{std::move(renewal)});  // liveness: in memory only
  }
  const std::set<TrialKey> unreconciled = s.reported;  // fail_attempt ends them
  for (const TrialKey key : unreconciled) {
    s.fail_attempt(key, "the coordinator restarted before it reconciled the report", now, out);
  }
  return out;
}

std::optional<JobStatus> Scheduler::job_status(const JobId& job) const {
  const auto found = state_->job_by_id.find(job);
  if (found == state_->job_by_id.end()) return {};
  return state_->status_of(state_->jobs[found->second]);
}

std::vector<JobStatus> Scheduler::jobs() const {
  return state_->statuses(state_->job_by_id, state_->jobs);
}

std::optional<WorkerStatus> Scheduler::worker_status(const WorkerId& worker) const {
  const auto index = state_->find(worker);
  if (!index) return {};
  return state_->status_of(state_->workers[*index]);
}

std::vector<WorkerStatus> Scheduler::workers() const {
  return state_->statuses(state_->worker_by_id, state_->workers);
}

std::optional<TrialState> Scheduler::trial_state(const TrialId& trial) const {
  const auto key = state_->find(trial);
  if (!key) return {};
  const Trial& t = state_->trial(*key);
  TrialState result{trial, t.status, t.attempt, {}, {}, t.reasons, t.outcome, {}};
  if (t.worker != kNoWorker) result.worker = state_->workers[t.worker].id;
  if (auto source = state_->cached_from.find(*key); source != state_->cached_from.end()) {
    result.cached_from = source->second;
  }
  if (t.status == TrialStatus::leased) result.lease_expires = t.lease_expires;
  return result;
}

bool Scheduler::visit_trials(const JobId& job,
                             const std::function<void(const TrialSummary&)>& visit) const {
  const auto found = state_->job_by_id.find(job);
  if (found == state_->job_by_id.end()) return false;
  const Job& j = state_->jobs[found->second];
  if (j.archived) return false;
  for (std::uint32_t i = 0; i < j.trials.size(); ++i) {
    const Trial& t = j.trials[i];
    visit(TrialSummary{i, t.status, t.outcome, *t.payload});
  }
  return true;
}

std::optional<JobId> Scheduler::job_to_archive(const std::set<JobId>& skip) const {
  for (const JobIx job : state_->to_archive) {
    if (!skip.contains(state_->jobs[job].id)) return state_->jobs[job].id;
  }
  return std::nullopt;
}

std::optional<TrialInput> Scheduler::trial_input(const TrialId& trial) const {
  const auto key = state_->find(trial);
  if (!key) return std::nullopt;
  return state_->input_of(state_->trial(*key));
}

std::optional<Digest> Scheduler::cache_key(const TrialId& trial) const {
  const auto key = state_->find(trial);
  if (!key) return std::nullopt;
  return state_->trial(*key).cache_key;
}

std::optional<Digest> Scheduler::segment(const TrialId& trial) const {
  const auto key = state_->find(trial);
  if (!key) return std::nullopt;
  return state_->digests[state_->trial(*key).digests.front()];  // the segment's is first
}

const std::string* Scheduler::payload(const TrialId& trial) const {
  const auto key = state_->find(trial);
  return key ? state_->trial(*key).payload.get() : nullptr;
}

std::size_t Scheduler::queued_trials() const {
  return state_->queued;
}

std::uint64_t Scheduler::held_payload_bytes() const {
  return state_->held_bytes;
}

std::uint64_t Scheduler::held_payload_bytes(std::string_view owner) const {
  const auto found = state_->held_bytes_by_owner.find(owner);
  return found == state_->held_bytes_by_owner.end() ? 0 : found->second;
}

std::size_t Scheduler::workers_offering(pack::Executor executor) const {
  return state_->offering[executor_ix(executor)];
}

bool Scheduler::has_work_for(const WorkerId& worker) const {
  const auto index = state_->find_alive(worker);
  return index && state_->next_job(state_->workers[*index]).has_value();
}

std::optional<pack::Executor> Scheduler::executor(const TrialId& trial) const {
  const auto key = state_->find(trial);
  if (!key) return std::nullopt;
  return state_->trial(*key).executor;
}

std::string Scheduler::query_text() const {
  const Scheduler& scheduler = *this;
  std::string text;
  const auto line = [&text](const std::string& content) { text += content + "\n"; };
  const auto millis = [](Instant instant) {
    return std::to_string(instant.time_since_epoch().count());
  };
  for (const JobStatus& job : scheduler.jobs()) {
    std::string counts;
    for (const std::uint64_t count : job.counts) counts += " " + std::to_string(count);
    for (const std::uint64_t count : job.outcomes) counts += " " + std::to_string(count);
    for (const std::uint64_t count : job.queued_by_executor) counts += " " + std::to_string(count);
    line("job " + job.id.str() + " " + job.name + " owner=" + job.owner + " retention=" +
         (job.retention ? std::string(keep_forks_name(job.retention->keep)) + "/" +
                              std::to_string(job.retention->after.count())
                        : "-") +
         " priority=" + std::to_string(job.priority) +
         " cancelled=" + std::to_string(job.cancelled) + " trials=" + std::to_string(job.trials) +
         counts + " failed=" + std::to_string(job.failed_attempts) + " fenced=" +
         std::to_string(job.fenced_reports) + " submitted=" + millis(job.submitted_at) +
         " finished=" + (job.finished_at ? millis(*job.finished_at) : "-") +
         " archived=" + std::to_string(job.archived) + " state=" + std::string(job.state()) +
         " cached=" + std::to_string(job.cached));
    if (job.archived) continue;
    for (std::uint32_t i = 0; i < job.trials; ++i) {
      const TrialId id{job.id, i};
      const TrialState state = *scheduler.trial_state(id);
      const TrialInput input = *scheduler.trial_input(id);
      std::string reasons;
      for (const std::string& reason : state.reasons) reasons += " [" + reason + "]";
      std::string bundles;
      for (const Digest& bundle : input.bundles) bundles += " " + bundle.str();
      line(" trial " + id.str() + " " + std::string(trial_status_name(state.status)) +
           " attempt=" + std::to_string(state.attempt) +
           " worker=" + (state.worker ? state.worker->str() : "-") + " reasons" + reasons +
           " outcome=" + (state.outcome ? std::string(outcome_name(*state.outcome)) : "-") +
           " payload=" + input.payload + " segment=" + input.segment.str() + " bundles" + bundles +
           " run_limit=" + std::to_string(input.run_limit.count()) +
           " executor=" + std::string(pack::executor_name(input.executor)) +
           " cache_key=" + (input.cache_key ? input.cache_key->str() : "-") +
           " cached_from=" + (state.cached_from ? state.cached_from->str() : "-"));
    }
  }
  for (const WorkerStatus& worker : scheduler.workers()) {
    if (!worker.alive) continue;
    std::string executors;
    for (const pack::Executor executor : worker.executors) {
      executors += " " + std::string(pack::executor_name(executor));
    }
    line("worker " + worker.id.str() + " slots=" + std::to_string(worker.slots) + " prefetch=" +
         std::to_string(worker.prefetch) + " leases=" + std::to_string(worker.leases) +
         " cached=" + std::to_string(worker.cached_digests) + " executors" + executors +
         " work=" + std::to_string(scheduler.has_work_for(worker.id)));
  }
  for (const pack::Executor executor : pack::kExecutors) {
    line("offering " + std::string(pack::executor_name(executor)) + " " +
         std::to_string(scheduler.workers_offering(executor)));
  }
  line("queued " + std::to_string(scheduler.queued_trials()));
  const std::optional<JobId> next = scheduler.job_to_archive();
  line("to_archive " + (next ? next->str() : std::string("-")));
  return text;
}

std::string Scheduler::state_text() const {
  const State& s = *state_;
  std::string text;
  const auto line = [&text](const std::string& content) { text += content + "\n"; };
  const auto millis = [](Instant instant) {
    return std::to_string(instant.time_since_epoch().count());
  };
  for (std::size_t i = 0; i < s.digests.size(); ++i) {
    line("digest " + std::to_string(i) + " " + s.digests[i].str());
  }
  for (const Job& job : s.jobs) {
    std::string counts;
    for (const std::uint64_t count : job.counts) counts += " " + std::to_string(count);
    for (const std::uint64_t count : job.outcomes) counts += " " + std::to_string(count);
    const std::string retention = job.retention
                                      ? std::string(keep_forks_name(job.retention->keep)) + "/" +
                                            std::to_string(job.retention->after.count())
                                      : "-";
    line("job " + job.id.str() + " name=" + job.name + " owner=" + job.owner +
         " retention=" + retention + " priority=" + std::to_string(job.priority) +
         " cancelled=" + std::to_string(job.cancelled) + " counts" + counts + " failed=" +
         std::to_string(job.failed_attempts) + " fenced=" + std::to_string(job.fenced_reports) +
         " cached=" + std::to_string(job.cached) + " submitted=" + millis(job.submitted_at) +
         " finished=" + (job.finished_at ? millis(*job.finished_at) : "-") + " trials=" +
         std::to_string(job.trial_count) + " archived=" + std::to_string(job.archived));
    for (std::size_t i = 0; i < job.trials.size(); ++i) {
      const Trial& t = job.trials[i];
      std::string digests;
      for (const DigestIx digest : t.digests) digests += " " + std::to_string(digest);
      std::string reasons;
      for (const std::string& reason : t.reasons) reasons += " [" + reason + "]";
      line(" trial " + std::to_string(i) + " " + std::string(trial_status_name(t.status)) +
           " attempt=" + std::to_string(t.attempt) + " leased=" + std::to_string(t.leased_attempt) +
           " worker=" + (t.worker == kNoWorker ? "-" : s.workers[t.worker].id.str()) +
           " deadline=" + millis(t.lease_deadline) +
           " run_limit=" + std::to_string(t.run_limit.count()) +
           " executor=" + std::string(pack::executor_name(t.executor)) + " digests" + digests +
           " payload=" + *t.payload + " reasons" + reasons +
           " outcome=" + (t.outcome ? std::string(outcome_name(*t.outcome)) : "-") +
           " cache_key=" + (t.cache_key ? t.cache_key->str() : "-"));
    }
    for (const pack::Executor executor : pack::kExecutors) {
      const Queue& q = job.queues[executor_ix(executor)];
      std::string queue;
      for (const std::uint32_t index : q.trials) queue += " " + std::to_string(index);
      line(" queue " + std::string(pack::executor_name(executor)) +
           " turn=" + (q.turn ? std::to_string(*q.turn) : "-") + ":" + queue);
      for (const auto& [digest, queued_here] : q.by_digest) {
        std::string trials;
        for (const std::uint32_t index : queued_here) trials += " " + std::to_string(index);
        line(" queued_by " + std::to_string(digest) + ":" + trials);
      }
    }
  }
  for (const Worker& worker : s.workers) {
    std::string cached;
    for (const DigestIx digest : worker.cached) cached += " " + std::to_string(digest);
    std::string leases;
    for (const TrialKey key : worker.leases) leases += " " + s.id_of(key).str();
    line("worker " + worker.id.str() + " alive=" + std::to_string(worker.alive) +
         " slots=" + std::to_string(worker.slots) + " prefetch=" + std::to_string(worker.prefetch) +
         " executors=" + std::to_string(worker.executors) + " cached" + cached + " leases" +
         leases);
  }
  for (const pack::Executor executor : pack::kExecutors) {
    for (const auto& [priority, round] : s.rounds[executor_ix(executor)]) {
      std::string order;
      for (const auto& [turn, job] : round) order += " " + s.jobs[job].id.str();
      line("round " + std::string(pack::executor_name(executor)) + " " + std::to_string(priority) +
           ":" + order);
    }
    line("offering " + std::string(pack::executor_name(executor)) + " " +
         std::to_string(s.offering[executor_ix(executor)]));
  }
  line("turns " + std::to_string(s.turns));
  // Which leases and workers the liveness indexes hold, not when they end.
  std::set<std::string> indexed;
  for (const auto& [expires, key] : s.lease_expiries) indexed.insert("lease " + s.id_of(key).str());
  for (const auto& [seen, worker] : s.last_heard)
    indexed.insert("heard " + s.workers[worker].id.str());
  for (const std::string& entry : indexed) line(entry);
  for (const TrialKey key : s.reported) line("reported " + s.id_of(key).str());
  for (const auto& [key, source] : s.cached_from) {
    line("cached " + s.id_of(key).str() + " from " + source.str());
  }
  line("queued " + std::to_string(s.queued));
  for (const JobIx job : s.to_archive) line("to_archive " + s.jobs[job].id.str());
  return text;
}

}  // namespace forktrial::coordinator
