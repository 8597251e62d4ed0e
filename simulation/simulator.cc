#include "simulation/simulator.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "base/timestamp.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/server.h"
#include "simulation/invariants.h"
#include "store/event_store.h"

namespace forktrial::simulation {

using namespace coordinator;

Faults every_fault() {
  Faults faults;
  faults.loss = 20;
  faults.duplication = 20;
  faults.min_delay = Duration{1};
  faults.max_delay = Duration{400};
  faults.worker_crashes = 4;
  faults.worker_stalls = 4;
  faults.coordinator_crashes = 3;
  faults.store_full = 2;
  faults.chaos = Duration{120'000};
  return faults;
}

namespace {

// The real worker's timings (worker/worker.cc, tools/cluster_command.cc).
constexpr std::int64_t kHeartbeat = 1'000;
constexpr std::int64_t kCoordinatorTimeout = 5'000;
constexpr std::int64_t kBusyBackoff = 1'000;  // a peer told "busy" tries again after this
// The real coordinator's (coordinator/server.cc).
constexpr std::int64_t kCommitWindow = 8;
// Time passes for the scheduler at every turn and, with no message, every
// ServerConfig::tick (the daemon's poll timeout).
constexpr std::int64_t kTick = coordinator::kDefaultTick.count();
constexpr std::int64_t kParkLimit = 1'000;
constexpr std::uint32_t kReconcileFailures = 10;  // per thousand: the store refuses a delta
constexpr std::uint32_t kAttemptFailures = 20;    // per thousand: the worker cannot run it
constexpr int kSegments = 100;
constexpr int kBundles = 10;

enum class Kind : std::uint8_t {
  // to the coordinator
  hello,
  heartbeat,
  offer,
  report,
  failed,
  // to a worker
  welcome,
  assignments,
  ok,
  stop,
  ack,
  out_of_order,
  busy,
};

struct Message {
  Kind kind = Kind::ok;
  Kind refused = Kind::ok;  // for busy: what was refused
  std::uint32_t worker = 0;
  std::uint64_t route = 0;  // the worker's connection it comes from or goes to
  std::uint32_t count = 0;  // an offer's free room
  ReportVerdict verdict = ReportVerdict::unknown;
  std::vector<AttemptRef> refs;
};

enum class EventKind : std::uint8_t {
  to_coordinator,
  to_worker,
  worker_wake,
  turn,
  tick,
  worker_crash,
  worker_restart,
  worker_stall,
  coordinator_crash,
  coordinator_restart,
  store_full,
  submit,
  cancel,
};

struct Event {
  std::int64_t at = 0;
  std::uint64_t seq = 0;
  EventKind kind = EventKind::tick;
  std::uint32_t who = 0;      // a worker's or a job's index
  std::uint64_t tag = 0;      // a wake's generation
  std::uint32_t message = 0;  // index in the message pool
  friend bool operator>(const Event& a, const Event& b) {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }
};

struct Held {
  std::int64_t finish = -1;  // -1 while waiting for a slot
};

struct Worker {
  std::uint32_t index = 0;
  WorkerId id;
  std::uint32_t slots = 1;
  std::uint32_t prefetch = 0;
  bool up = false;
  std::uint64_t route = 0;
  std::int64_t stalled_until = 0;
  bool welcomed = false;
  std::int64_t last_heard = 0;
  std::int64_t last_hello = 0;
  std::int64_t last_heartbeat = 0;
  bool offer_out = false;
  std::int64_t offer_at = 0;
  std::int64_t next_offer = 0;
  std::int64_t resend_at = -1;  // unacknowledged reports go again then
  std::uint32_t started = 0;
  std::map<AttemptRef, Held> held;
  std::map<AttemptRef, bool> unacked;  // value: a failure rather than a report
  std::uint64_t generation = 0;        // of its pending wake
  std::int64_t wake_at = -1;
};

struct JobPlan {
  JobId id;
  int priority = 0;
  std::uint32_t size = 0;
  std::int64_t submit_at = 0;
  std::int64_t cancel_at = -1;
  bool submitted = false;  // acknowledged
  bool cancelled = false;
};

struct Reconciling {
  std::uint64_t route = 0;
  std::uint32_t worker = 0;
  TrialId trial;
  Attempt attempt = 0;
  bool refused = false;
  Outcome outcome = Outcome::completed;
};

struct Parked {
  std::uint32_t worker = 0;
  std::uint32_t free = 0;
  std::int64_t since = 0;
};

class Scope {
 public:
  explicit Scope(const std::function<void(bool)>& scope) : scope_(scope) {
    if (scope_) scope_(true);
  }
  ~Scope() {
    if (scope_) scope_(false);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const std::function<void(bool)>& scope_;
};

Instant instant(std::int64_t ms) {
  return Instant{Duration{ms}};
}

class Simulation {
 public:
  explicit Simulation(const Config& config)
      : config_(config),
        rng_(config.seed),
        scheduler_(config.scheduler),
        store_(open_store(config)) {
    report_.seed = config.seed;
    for (int i = 0; i < kSegments; ++i)
      segments_.push_back(Sha256::of("segment " + std::to_string(i)));
    for (int i = 0; i < kBundles; ++i)
      bundles_.push_back(Sha256::of("bundle " + std::to_string(i)));
    plan_jobs();
    for (std::uint32_t i = 0; i < config.workers; ++i) {
      Worker& w = workers_.emplace_back();
      w.index = i;
      w.id = WorkerId{"w" + std::to_string(i)};
      w.slots = static_cast<std::uint32_t>(1 + roll(config.max_slots));
      w.prefetch = static_cast<std::uint32_t>(roll(3));
      // Workers start over the first seconds, as a fleet does.
      push({static_cast<std::int64_t>(roll(2'000)), 0, EventKind::worker_restart, i});
    }
    push({kTick, 0, EventKind::tick});
    plan_faults();
  }

  Report run() {
    const auto started = std::chrono::steady_clock::now();
    give_up_ = give_up();
    std::int64_t next_progress = config_.progress_every.count();
    while (!queue_.empty() && !violation_ && !finished_) {
      const Event event = queue_.top();
      queue_.pop();
      now_ = event.at;
      if (now_ > give_up_) {
        fail("the run did not finish within " + std::to_string(give_up_) + " ms of virtual time; " +
             std::to_string(invariants_.ended()) + " of " + std::to_string(config_.trials) +
             " trials ended");
        break;
      }
      ++report_.events;
      mix(static_cast<std::uint64_t>(event.at));
      mix(static_cast<std::uint64_t>(event.kind) << 32 | event.who);
      handle(event);
      if (config_.progress && now_ >= next_progress) {
        config_.progress(invariants_.ended(), Duration{now_});
        next_progress += config_.progress_every.count();
      }
    }
    if (!violation_ && !finished_) fail("the simulation ran out of events before the run finished");
    if (config_.progress) config_.progress(invariants_.ended(), Duration{now_});  // the last sample
    for (const JobStatus& job : scheduler_.jobs()) {
      report_.reconciled += job.count(TrialStatus::reconciled);
      report_.abandoned += job.count(TrialStatus::abandoned);
      report_.cancelled += job.count(TrialStatus::cancelled);
    }
    report_.virtual_time = Duration{now_};
    report_.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(trace_));
    report_.trace = text;
    report_.violation = violation_;
    return report_;
  }

 private:
  static store::EventStore open_store(const Config& config) {
    store::StoreOptions options;
    options.sync = false;
    options.sync_meta = false;
    options.initial_map_size = std::size_t{1} << 30;
    options.clock = [] { return std::string("2027-01-15T08:00:00.000Z"); };
    return store::EventStore(config.store_dir, options);
  }

  // ---- randomness and bookkeeping

  std::uint64_t roll(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(std::uint32_t per_thousand) { return roll(1000) < per_thousand; }
  bool chaos() const { return now_ < config_.faults.chaos.count(); }

  void mix(std::uint64_t value) {
    trace_ ^= value;
    trace_ *= 0x100000001b3ULL;
  }

  void push(Event event) {
    event.seq = ++seq_;
    queue_.push(event);
  }

  void fail(std::string what) {
    if (!violation_) violation_ = "at " + std::to_string(now_) + " ms: " + std::move(what);
  }

  void check(std::optional<std::string> broken) {
    if (broken) fail(std::move(*broken));
  }

  std::uint32_t store_message(Message message) {
    if (!free_.empty()) {
      const std::uint32_t index = free_.back();
      free_.pop_back();
      pool_[index] = std::move(message);
      return index;
    }
    pool_.push_back(std::move(message));
    return static_cast<std::uint32_t>(pool_.size() - 1);
  }

  Message take_message(std::uint32_t index) {
    Message message = std::move(pool_[index]);
    pool_[index].refs.clear();
    free_.push_back(index);
    return message;
  }

  // A message on the network: lost, delivered once or twice, each after its
  // own delay.
  void send(EventKind direction, const Message& message) {
    ++report_.messages;
    const bool faulty = chaos();
    if (faulty && chance(config_.faults.loss)) {
      ++report_.lost;
      return;
    }
    const int copies = faulty && chance(config_.faults.duplication) ? 2 : 1;
    report_.duplicated += copies - 1;
    const auto span = static_cast<std::uint64_t>(config_.faults.max_delay.count() -
                                                 config_.faults.min_delay.count() + 1);
    for (int i = 0; i < copies; ++i) {
      const std::int64_t delay =
          config_.faults.min_delay.count() + static_cast<std::int64_t>(roll(span));
      push({now_ + delay, 0, direction, message.worker, 0, store_message(message)});
    }
  }

  // ---- the plan

  void plan_jobs() {
    std::vector<std::uint64_t> weights;
    std::uint64_t total = 0;
    for (std::uint32_t j = 0; j < config_.jobs; ++j) total += weights.emplace_back(1 + roll(10));
    std::uint64_t given = 0;
    for (std::uint32_t j = 0; j < config_.jobs; ++j) {
      JobPlan& job = jobs_.emplace_back();
      char id[16];
      std::snprintf(id, sizeof id, "j%03u", j);
      job.id = JobId{id};
      job.priority = static_cast<int>(roll(3));
      const std::uint64_t size =
          j + 1 == config_.jobs ? config_.trials - given
                                : std::max<std::uint64_t>(1, config_.trials * weights[j] / total);
      job.size = static_cast<std::uint32_t>(std::min<std::uint64_t>(size, config_.trials - given));
      given += job.size;
      // Submitted over the first half of the chaos (or the first seconds).
      const auto window = static_cast<std::uint64_t>(
          std::max<std::int64_t>(config_.faults.chaos.count() / 2, 5'000));
      job.submit_at = j == 0 ? 0 : static_cast<std::int64_t>(roll(window));
      if (j == 2) job.cancel_at = job.submit_at + 1'000 + static_cast<std::int64_t>(roll(4'000));
      if (job.size > 0) push({job.submit_at, 0, EventKind::submit, j});
      if (job.size > 0 && job.cancel_at >= 0) push({job.cancel_at, 0, EventKind::cancel, j});
    }
  }

  void plan_faults() {
    const Faults& f = config_.faults;
    const auto chaos = static_cast<std::uint64_t>(f.chaos.count());
    if (chaos == 0) return;
    for (std::uint32_t i = 0; i < f.coordinator_crashes; ++i) {
      push({static_cast<std::int64_t>(1'000 + roll(chaos)), 0, EventKind::coordinator_crash});
    }
    for (std::uint32_t i = 0; i < f.store_full; ++i) {
      push({static_cast<std::int64_t>(1'000 + roll(chaos)), 0, EventKind::store_full});
    }
    // Worker faults: each second of chaos, each worker with the given odds.
    const std::uint64_t seconds = chaos / 1'000;
    const std::uint64_t crashes = seconds * config_.workers * f.worker_crashes / 1'000;
    const std::uint64_t stalls = seconds * config_.workers * f.worker_stalls / 1'000;
    for (std::uint64_t i = 0; i < crashes; ++i) {
      push({static_cast<std::int64_t>(roll(chaos)), 0, EventKind::worker_crash,
            static_cast<std::uint32_t>(roll(config_.workers))});
    }
    for (std::uint64_t i = 0; i < stalls; ++i) {
      push({static_cast<std::int64_t>(roll(chaos)), 0, EventKind::worker_stall,
            static_cast<std::uint32_t>(roll(config_.workers))});
    }
  }

  // ---- dispatch

  void handle(const Event& event) {
    switch (event.kind) {
      case EventKind::to_coordinator: {
        Message message = take_message(event.message);
        if (!up_) return;  // nobody listens
        inbox_.push_back(std::move(message));
        schedule_turn();
        return;
      }
      case EventKind::to_worker:
        return worker_receives(event);
      case EventKind::worker_wake: {
        Worker& w = workers_[event.who];
        if (event.tag != w.generation) return;  // superseded
        w.wake_at = -1;
        return worker_step(w);
      }
      case EventKind::turn:
        turn_scheduled_ = false;
        return turn();
      case EventKind::tick:
        return tick();
      case EventKind::worker_crash:
        return worker_crash(workers_[event.who]);
      case EventKind::worker_restart:
        return worker_restart(workers_[event.who]);
      case EventKind::worker_stall: {
        Worker& w = workers_[event.who];
        if (!w.up) return;
        ++report_.worker_stalls;
        // Longer than a lease, often: its leases lapse while it sleeps.
        const auto lease = static_cast<std::uint64_t>(config_.scheduler.lease_duration.count());
        w.stalled_until = now_ + static_cast<std::int64_t>(lease / 2 + roll(2 * lease));
        return;
      }
      case EventKind::coordinator_crash:
        return coordinator_crash();
      case EventKind::coordinator_restart:
        return coordinator_restart();
      case EventKind::store_full:
        ++report_.store_full_episodes;
        full_until_ = now_ + 2'000 + static_cast<std::int64_t>(roll(15'000));
        return;
      case EventKind::submit:
        submissions_.push_back(event.who);
        return schedule_turn();
      case EventKind::cancel:
        cancellations_.push_back(event.who);
        return schedule_turn();
    }
  }

  // ---- the coordinator: the real one's loop, message for message

  void schedule_turn() {
    if (turn_scheduled_ || !up_) return;
    turn_scheduled_ = true;
    push({now_ + kCommitWindow, 0, EventKind::turn});
  }

  void turn() {
    if (!up_) return;
    Scope scope(config_.coordinator_scope);
    for (Message& message : inbox_) receive(message);
    inbox_.clear();
    client_requests();
    // The daemon's end of turn: time passes, then parked offers are served.
    if (!full_) keep(scheduler_.tick(instant(now_)));
    serve_parked();
    flush();
  }

  void tick() {
    push({now_ + kTick, 0, EventKind::tick});
    if (up_) {
      Scope scope(config_.coordinator_scope);
      if (full_ && now_ >= full_until_) resume();
      if (!full_) {
        keep(scheduler_.tick(instant(now_)));
        client_requests();
        serve_parked();
        flush();
      }
    }
    if (violation_) return;
    check_counters();
    if (!chaos() && up_ && !full_ && all_finished()) {
      check(invariants_.at_end(scheduler_));
      finished_ = true;
    }
  }

  bool all_finished() const {
    for (const JobPlan& job : jobs_) {
      if (job.size == 0) continue;
      if (!job.submitted) return false;
      const auto status = scheduler_.job_status(job.id);
      if (!status || !status->finished()) return false;
    }
    return reconciling_.empty() && pending_.empty();
  }

  // The scheduler's counters agree with each other.
  void check_counters() {
    if (!up_) return;
    std::uint64_t leased = 0;
    for (const JobStatus& job : scheduler_.jobs()) {
      std::uint64_t total = 0;
      for (const std::uint64_t count : job.counts) total += count;
      if (total != job.trials) return fail("job " + job.id.str() + "'s counts do not add up");
      leased += job.count(TrialStatus::leased);
    }
    std::uint64_t held = 0;
    for (const WorkerStatus& worker : scheduler_.workers()) {
      if (!worker.alive && worker.running > 0) {
        return fail("lost worker " + worker.id.str() + " holds leases");
      }
      if (worker.running > worker.slots + worker.prefetch) {
        return fail("worker " + worker.id.str() + " holds more leases than it has room for");
      }
      held += worker.running;
    }
    if (held != leased)
      fail("workers hold " + std::to_string(held) + " leases, jobs count " +
           std::to_string(leased));
  }

  void keep(Records records) {
    for (auto& record : records) pending_.push_back(std::move(record));
  }

  void reply(std::uint64_t route, std::uint32_t worker, Message message) {
    message.worker = worker;
    message.route = route;
    outbox_.push_back(std::move(message));
  }

  void reply_kind(std::uint64_t route, std::uint32_t worker, Kind kind) {
    Message message;
    message.kind = kind;
    reply(route, worker, std::move(message));
  }

  void reply_ack(std::uint64_t route, std::uint32_t worker, const AttemptRef& ref,
                 ReportVerdict verdict) {
    Message message;
    message.kind = Kind::ack;
    message.verdict = verdict;
    message.refs.push_back(ref);
    reply(route, worker, std::move(message));
  }

  void reply_busy(const Message& refused) {
    ++report_.busy_replies;
    Message message;
    message.kind = Kind::busy;
    message.refused = refused.kind;
    message.refs = refused.refs;
    reply(refused.route, refused.worker, std::move(message));
  }

  void receive(const Message& m) {
    mix(static_cast<std::uint64_t>(m.kind) << 40 | m.worker);
    if (m.kind == Kind::hello) return on_hello(m);
    auto peer = peers_.find(m.route);
    if (peer == peers_.end()) return reply_kind(m.route, m.worker, Kind::out_of_order);
    // While the store is full nothing can be recorded: a peer is told to
    // come back, apart from a heartbeat, which is answered (no lease lapses
    // meanwhile; they are all renewed on resuming).
    if (full_) {
      if (m.kind == Kind::heartbeat) return reply_kind(m.route, m.worker, Kind::ok);
      return reply_busy(m);
    }
    const WorkerId& id = workers_[m.worker].id;
    switch (m.kind) {
      case Kind::offer:
        return on_offer(m);
      case Kind::heartbeat: {
        auto beat = scheduler_.heartbeat(id, m.refs, instant(now_));
        if (!beat) return reply_kind(m.route, m.worker, Kind::out_of_order);
        keep(std::move(beat->records));
        if (beat->stale.empty()) return reply_kind(m.route, m.worker, Kind::ok);
        Message stop;
        stop.kind = Kind::stop;
        stop.refs = std::move(beat->stale);
        return reply(m.route, m.worker, std::move(stop));
      }
      case Kind::failed: {
        const AttemptRef& ref = m.refs.front();
        auto result =
            scheduler_.attempt_failed(id, ref.trial, ref.attempt, "could not run", instant(now_));
        keep(std::move(result.records));
        return reply_ack(m.route, m.worker, ref, result.verdict);
      }
      case Kind::report: {
        const AttemptRef& ref = m.refs.front();
        auto judged = scheduler_.on_report(id, ref.trial, ref.attempt, instant(now_));
        keep(std::move(judged.records));
        if (judged.verdict == ReportVerdict::fenced) ++report_.fenced;
        if (judged.verdict == ReportVerdict::duplicate) ++report_.duplicates;
        if (judged.verdict != ReportVerdict::accepted) {
          return reply_ack(m.route, m.worker, ref, judged.verdict);
        }
        Reconciling r{m.route, m.worker, ref.trial, ref.attempt, false, Outcome::completed};
        r.refused = chance(kReconcileFailures);
        r.outcome = kOutcomes[roll(kOutcomes.size())];
        reconciling_.push_back(std::move(r));
        return;
      }
      default:
        return;
    }
  }

  void on_hello(const Message& m) {
    Worker& w = workers_[m.worker];
    const auto known = scheduler_.worker_status(w.id);
    const bool reconnected = known && known->alive && !routes_.contains(m.worker);
    if (!reconnected) {
      if (full_) return reply_busy(m);
      WorkerHello hello{w.id, w.slots, w.prefetch, {}};
      auto joined = scheduler_.worker_joined(std::move(hello), instant(now_));
      if (!joined) return fail("a hello was refused: " + joined.error().message);
      keep(std::move(*joined));
    }
    if (auto old = routes_.find(m.worker); old != routes_.end()) peers_.erase(old->second);
    peers_[m.route] = m.worker;
    routes_[m.worker] = m.route;
    std::erase_if(parked_, [&](const auto& entry) { return entry.second.worker == m.worker; });
    reply_kind(m.route, m.worker, Kind::welcome);
  }

  void on_offer(const Message& m) {
    parked_.erase(m.route);
    const auto status = scheduler_.worker_status(workers_[m.worker].id);
    if (m.count > 0 && scheduler_.queued_trials() == 0 && status && status->alive) {
      parked_[m.route] = Parked{m.worker, m.count, now_};
      return;
    }
    assign(m.route, m.worker, m.count);
  }

  void serve_parked() {
    if (full_) return;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (scheduler_.queued_trials() > 0 || now_ - it->second.since >= kParkLimit) {
        assign(it->first, it->second.worker, it->second.free);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void assign(std::uint64_t route, std::uint32_t worker, std::uint32_t free) {
    auto work = scheduler_.request_work(workers_[worker].id, free, instant(now_));
    if (!work) return reply_kind(route, worker, Kind::out_of_order);
    keep(std::move(work->records));
    Message message;
    message.kind = Kind::assignments;
    for (const Assignment& a : work->assignments) message.refs.push_back({a.trial, a.attempt});
    reply(route, worker, std::move(message));
  }

  // Submissions and cancellations from clients, taken in the turn.
  void client_requests() {
    if (full_) return;  // they ask again
    for (auto it = submissions_.begin(); it != submissions_.end();) {
      JobPlan& plan = jobs_[*it];
      JobSubmission job{plan.id, plan.priority, "job " + plan.id.str(), {}};
      job.trials.reserve(plan.size);
      for (std::uint32_t i = 0; i < plan.size; ++i) {
        job.trials.push_back(
            TrialInput{"{\"scenario\":\"sim\",\"candidate\":" + std::to_string(i % 97) +
                           ",\"trial\":" + std::to_string(i) + "}",
                       segments_[roll(kSegments)],
                       {bundles_[roll(kBundles)]}});
      }
      auto submitted = scheduler_.submit(std::move(job), instant(now_));
      if (!submitted) {
        fail("the submission of " + plan.id.str() + " was refused: " + submitted.error().message);
        return;
      }
      keep(std::move(*submitted));
      acknowledging_jobs_.push_back(*it);
      it = submissions_.erase(it);
    }
    for (auto it = cancellations_.begin(); it != cancellations_.end();) {
      JobPlan& plan = jobs_[*it];
      if (!plan.submitted) {
        ++it;  // not accepted yet: the client cancels once it is
        continue;
      }
      auto cancelled = scheduler_.cancel(plan.id, instant(now_));
      if (!cancelled) return fail("cancel refused: " + cancelled.error().message);
      keep(std::move(cancelled->records));
      std::map<std::uint32_t, Message> stops;
      for (const RunningTrial& running : cancelled->running) {
        const std::uint32_t w = worker_index(running.worker);
        auto route = routes_.find(w);
        if (route == routes_.end()) continue;
        Message& stop = stops[w];
        stop.kind = Kind::stop;
        stop.route = route->second;
        stop.refs.push_back({running.trial, running.attempt});
      }
      for (auto& [w, stop] : stops) reply(stop.route, w, std::move(stop));
      plan.cancelled = true;
      acknowledging_cancels_.push_back(*it);
      it = cancellations_.erase(it);
    }
  }

  static std::uint32_t worker_index(const WorkerId& id) {
    return static_cast<std::uint32_t>(std::stoul(id.str().substr(1)));
  }

  // The turn's one transaction, then the replies.
  void flush() {
    if (pending_.empty() && reconciling_.empty()) return send_outbox();
    for (Reconciling& r : reconciling_) {
      if (!r.refused) continue;
      auto failed =
          scheduler_.reconcile_failed(r.trial, "the store refused the report", instant(now_));
      if (!failed) return fail("reconcile_failed refused: " + failed.error().message);
      keep(std::move(*failed));
    }
    Records records = pending_;
    std::vector<store::NewEvent> results;
    for (const Reconciling& r : reconciling_) {
      if (r.refused) continue;
      records.push_back(TrialReconciled{r.trial, r.attempt, r.outcome, instant(now_)});
      store::NewEvent result;
      result.type = "trial.result";
      result.payload = "{\"trial\":\"" + r.trial.str() +
                       "\",\"attempt\":" + std::to_string(r.attempt) + ",\"outcome\":\"" +
                       std::string(outcome_name(r.outcome)) + "\"}";
      result.timestamp = format_timestamp(instant(now_).time_since_epoch().count());
      result.actor = std::string(kCoordinatorActor);
      results.push_back(std::move(result));
    }
    if (now_ < full_until_) return store_full();
    auto written = store_.write(
        [&](store::Writer& writer) { return append_to_log(writer, records, results); });
    if (!written) return fail("the store refused the log: " + written.error().message);
    ++report_.commits;
    report_.records += records.size();
    count_records(records);
    check(invariants_.committed(records));
    pending_.clear();
    for (const Reconciling& r : reconciling_) {
      if (r.refused) {  // the attempt failed; nothing to send again
        reply_ack(r.route, r.worker, {r.trial, r.attempt}, ReportVerdict::fenced);
        continue;
      }
      auto done = scheduler_.reconciled(r.trial, r.outcome, instant(now_));
      if (!done) return fail("reconciled refused: " + done.error().message);
      check(invariants_.report_acknowledged(r.trial, r.attempt));
      reply_ack(r.route, r.worker, {r.trial, r.attempt}, ReportVerdict::accepted);
    }
    reconciling_.clear();
    for (const std::uint32_t j : acknowledging_jobs_) {
      jobs_[j].submitted = true;
      invariants_.job_acknowledged(jobs_[j].id);
    }
    acknowledging_jobs_.clear();
    acknowledging_cancels_.clear();
    send_outbox();
  }

  void count_records(const Records& records) {
    for (const OrchestrationRecord& record : records) {
      if (std::holds_alternative<TrialRequeued>(record)) ++report_.requeued;
      if (std::holds_alternative<WorkerLost>(record)) ++report_.workers_lost;
    }
  }

  void send_outbox() {
    for (Message& message : outbox_) send(EventKind::to_worker, message);
    outbox_.clear();
  }

  // A commit failed for want of room: what was not committed never
  // happened. The scheduler is rebuilt from the log, every reply of the turn
  // becomes "busy", and the coordinator waits for room.
  void store_full() {
    full_ = true;
    pending_.clear();
    std::vector<Message> answered = std::move(outbox_);
    outbox_.clear();
    for (const Reconciling& r : reconciling_) {
      Message refused;
      refused.kind = Kind::report;
      refused.worker = r.worker;
      refused.route = r.route;
      refused.refs.push_back({r.trial, r.attempt});
      reply_busy(refused);
    }
    reconciling_.clear();
    // Replies that told of a decision now undone become "busy"; the others
    // decided nothing the log lacks. A stale trial is named again at the
    // next heartbeat.
    for (Message& m : answered) {
      if (m.kind == Kind::stop) continue;
      if (m.kind == Kind::assignments || m.kind == Kind::ack || m.kind == Kind::welcome) {
        m.refused = m.kind == Kind::assignments ? Kind::offer
                    : m.kind == Kind::ack       ? Kind::report
                                                : Kind::hello;
        m.kind = Kind::busy;
        m.refs.clear();
        ++report_.busy_replies;
      }
      outbox_.push_back(std::move(m));
    }
    requests_undone();
    rebuild_from_log();
    // Every worker's next hello is a reconnection, as after a restart.
    routes_.clear();
    peers_.clear();
    parked_.clear();
    send_outbox();
  }

  // The clients' requests of a turn that did not commit were not answered:
  // they ask again.
  void requests_undone() {
    for (const std::uint32_t j : acknowledging_jobs_) submissions_.push_back(j);
    acknowledging_jobs_.clear();
    for (const std::uint32_t j : acknowledging_cancels_) {
      jobs_[j].cancelled = false;
      cancellations_.push_back(j);
    }
    acknowledging_cancels_.clear();
  }

  void resume() {
    full_ = false;
    keep(scheduler_.recover(instant(now_)));
    flush();
  }

  void rebuild_from_log() {
    Scheduler rebuilt(config_.scheduler);
    auto snapshot = store_.snapshot();
    auto read = read_log(
        snapshot, [&](OrchestrationRecord&& record) { rebuilt.replay(std::move(record)); },
        [](const store::EventView&) {});
    if (!read) return fail("the log does not replay: " + read.error());
    scheduler_ = std::move(rebuilt);
    check(invariants_.after_restart(scheduler_));
  }

  void coordinator_crash() {
    if (!up_) return;
    Scope scope(config_.coordinator_scope);
    ++report_.coordinator_restarts;
    up_ = false;
    if (config_.compare_replay && !full_) crashed_state_ = scheduler_.state_text();
    scheduler_ = Scheduler(config_.scheduler);
    inbox_.clear();
    pending_.clear();
    reconciling_.clear();
    outbox_.clear();
    parked_.clear();
    peers_.clear();
    routes_.clear();
    requests_undone();
    full_ = false;
    push(
        {now_ + 1'000 + static_cast<std::int64_t>(roll(4'000)), 0, EventKind::coordinator_restart});
  }

  void coordinator_restart() {
    Scope scope(config_.coordinator_scope);
    up_ = true;
    rebuild_from_log();
    if (!crashed_state_.empty() && scheduler_.state_text() != crashed_state_) {
      fail("the scheduler replayed from the log differs from the one that crashed");
    }
    crashed_state_.clear();
    crashed_state_.shrink_to_fit();
    keep(scheduler_.recover(instant(now_)));
    flush();
  }

  // ---- the workers: the real one's loop

  void worker_restart(Worker& w) {
    if (w.up) return;
    w.up = true;
    w.route = ++routes_made_;
    w.stalled_until = 0;
    w.welcomed = false;
    w.held.clear();
    w.unacked.clear();
    w.started = 0;
    w.offer_out = false;
    w.next_offer = 0;
    w.resend_at = -1;
    w.last_heard = now_;
    say_hello(w);
    schedule_wake(w);
  }

  void worker_crash(Worker& w) {
    if (!w.up) return;
    ++report_.worker_crashes;
    w.up = false;
    ++w.generation;
    push({now_ + 1'000 + static_cast<std::int64_t>(roll(9'000)), 0, EventKind::worker_restart,
          w.index});
  }

  void to_coordinator(Worker& w, Kind kind, std::vector<AttemptRef> refs = {},
                      std::uint32_t count = 0) {
    Message message;
    message.kind = kind;
    message.worker = w.index;
    message.route = w.route;
    message.count = count;
    message.refs = std::move(refs);
    send(EventKind::to_coordinator, message);
  }

  void say_hello(Worker& w) {
    w.last_hello = now_;
    to_coordinator(w, Kind::hello);
  }

  void send_unacked(Worker& w) {
    for (const auto& [ref, failure] : w.unacked) {
      to_coordinator(w, failure ? Kind::failed : Kind::report, {ref});
    }
  }

  void worker_receives(const Event& event) {
    Worker& w = workers_[event.who];
    if (!w.up || pool_[event.message].route != w.route) {
      take_message(event.message);  // its connection is gone
      return;
    }
    if (now_ < w.stalled_until) {
      push({w.stalled_until, 0, EventKind::to_worker, w.index, 0, event.message});
      return;
    }
    const Message m = take_message(event.message);
    w.last_heard = now_;
    switch (m.kind) {
      case Kind::welcome:
        w.welcomed = true;
        send_unacked(w);
        break;
      case Kind::assignments:
        w.offer_out = false;
        for (const AttemptRef& ref : m.refs) w.held.try_emplace(ref);
        break;
      case Kind::stop:
        for (const AttemptRef& ref : m.refs) {
          auto it = w.held.find(ref);
          if (it == w.held.end()) continue;
          if (it->second.finish >= 0) --w.started;
          w.held.erase(it);
        }
        break;
      case Kind::ack:
        w.unacked.erase(m.refs.front());
        break;
      case Kind::out_of_order:
        w.welcomed = false;
        say_hello(w);
        break;
      case Kind::busy:
        if (m.refused == Kind::hello) {
          w.last_hello = now_ - kHeartbeat + kBusyBackoff;
        } else if (m.refused == Kind::offer) {
          w.offer_out = false;
          w.next_offer = now_ + kBusyBackoff;
        } else {
          w.resend_at = now_ + kBusyBackoff;
        }
        break;
      default:
        break;
    }
    worker_step(w);
  }

  void worker_step(Worker& w) {
    if (!w.up) return;
    if (now_ < w.stalled_until) return schedule_wake(w);
    // Trials that finished are reported (or said to have failed).
    for (auto it = w.held.begin(); it != w.held.end();) {
      if (it->second.finish < 0 || it->second.finish > now_) {
        ++it;
        continue;
      }
      const bool failure = chance(kAttemptFailures);
      w.unacked[it->first] = failure;
      to_coordinator(w, failure ? Kind::failed : Kind::report, {it->first});
      --w.started;
      it = w.held.erase(it);
    }
    // Held assignments start as slots free up, the first to arrive first.
    for (auto& [ref, held] : w.held) {
      if (w.started >= w.slots) break;
      if (held.finish >= 0) continue;
      const auto span =
          static_cast<std::uint64_t>(config_.trial_max.count() - config_.trial_min.count() + 1);
      held.finish = now_ + config_.trial_min.count() + static_cast<std::int64_t>(roll(span));
      ++w.started;
    }
    if (w.resend_at >= 0 && now_ >= w.resend_at) {
      w.resend_at = -1;
      send_unacked(w);
    }
    if (w.welcomed && now_ - w.last_heartbeat >= kHeartbeat) {
      std::vector<AttemptRef> running;
      for (const auto& [ref, held] : w.held) running.push_back(ref);
      to_coordinator(w, Kind::heartbeat, std::move(running));
      w.last_heartbeat = now_;
    }
    if (now_ - w.last_heard >= kCoordinatorTimeout && now_ - w.last_hello >= kHeartbeat) {
      w.welcomed = false;
      say_hello(w);
    }
    if (w.offer_out && now_ - w.offer_at >= kCoordinatorTimeout) w.offer_out = false;
    const std::size_t room = std::size_t{w.slots} + w.prefetch;
    if (w.welcomed && !w.offer_out && now_ >= w.next_offer && w.held.size() < room) {
      to_coordinator(w, Kind::offer, {}, static_cast<std::uint32_t>(room - w.held.size()));
      w.offer_out = true;
      w.offer_at = now_;
    }
    schedule_wake(w);
  }

  // The worker's next timer: a trial finishing, a heartbeat, a silence to
  // notice, an offer to repeat.
  void schedule_wake(Worker& w) {
    std::int64_t at = std::max(now_ + 1, w.stalled_until);
    if (now_ >= w.stalled_until) {
      std::int64_t next = w.last_heard + kCoordinatorTimeout;
      if (w.welcomed) next = std::min(next, w.last_heartbeat + kHeartbeat);
      if (w.offer_out) next = std::min(next, w.offer_at + kCoordinatorTimeout);
      if (!w.offer_out && w.next_offer > now_) next = std::min(next, w.next_offer);
      if (w.resend_at >= 0) next = std::min(next, w.resend_at);
      for (const auto& [ref, held] : w.held) {
        if (held.finish >= 0) next = std::min(next, held.finish);
      }
      at = std::max(at, next);
    }
    if (w.wake_at >= 0 && w.wake_at <= at && w.wake_at > now_) return;  // an earlier one stands
    w.wake_at = at;
    push({at, 0, EventKind::worker_wake, w.index, ++w.generation});
  }

  // The liveness bound: Config::give_up, or derived from the work.
  std::int64_t give_up() const {
    if (config_.give_up.count() > 0) return config_.give_up.count();
    std::uint64_t slots = 0;
    for (const Worker& w : workers_) slots += w.slots;
    const auto mean =
        static_cast<std::uint64_t>((config_.trial_min.count() + config_.trial_max.count()) / 2);
    return static_cast<std::int64_t>(3'600'000 + 10 * config_.trials * mean /
                                                     std::max<std::uint64_t>(slots, 1));
  }

  const Config& config_;
  std::mt19937_64 rng_;
  Invariants invariants_;
  Scheduler scheduler_;
  store::EventStore store_;
  Report report_;
  std::optional<std::string> violation_;
  bool finished_ = false;
  std::int64_t now_ = 0;
  std::int64_t give_up_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t trace_ = 0xcbf29ce484222325ULL;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  std::vector<Message> pool_;
  std::vector<std::uint32_t> free_;
  std::vector<Digest> segments_;
  std::vector<Digest> bundles_;
  std::vector<JobPlan> jobs_;
  std::vector<Worker> workers_;
  std::uint64_t routes_made_ = 0;

  // The coordinator's memory (the store is its disk).
  bool up_ = true;
  bool full_ = false;
  std::int64_t full_until_ = -1;
  bool turn_scheduled_ = false;
  std::vector<Message> inbox_;
  std::vector<Message> outbox_;
  Records pending_;
  std::vector<Reconciling> reconciling_;
  std::unordered_map<std::uint64_t, std::uint32_t> peers_;   // route -> worker
  std::unordered_map<std::uint32_t, std::uint64_t> routes_;  // worker -> route
  std::map<std::uint64_t, Parked> parked_;                   // by route
  std::vector<std::uint32_t> submissions_;
  std::vector<std::uint32_t> cancellations_;
  std::vector<std::uint32_t> acknowledging_jobs_;
  std::vector<std::uint32_t> acknowledging_cancels_;
  std::string crashed_state_;
};

}  // namespace

Report simulate(const Config& config) {
  if (config.store_dir.empty()) {
    throw Error(ErrorCode::invalid_argument, "the simulation needs a directory for its store");
  }
  if (config.workers == 0 || config.trials == 0 || config.jobs == 0 || config.max_slots == 0) {
    throw Error(ErrorCode::invalid_argument,
                "the simulation needs at least one worker with a slot, one trial and one job");
  }
  if (config.trial_max < config.trial_min || config.faults.max_delay < config.faults.min_delay ||
      config.trial_min.count() <= 0 || config.faults.min_delay.count() <= 0) {
    throw Error(ErrorCode::invalid_argument,
                "the simulation needs positive trial times and message delays, the least first");
  }
  std::filesystem::create_directories(config.store_dir);
  struct Cleanup {
    const std::filesystem::path& dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{config.store_dir};
  Simulation simulation(config);
  return simulation.run();
}

}  // namespace forktrial::simulation
