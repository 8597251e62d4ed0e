#include "simulation/simulator.h"

#include <capnp/message.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "base/timestamp.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/server.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "simulation/invariants.h"
#include "store/event_store.h"
#include "worker/session.h"

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

using schema::wire::Envelope;
using WireVerdict = schema::wire::ReportVerdict;
using Frames = std::vector<std::pair<std::string, std::string>>;

// The real worker's timings (worker/worker.cc, tools/cluster_command.cc).
constexpr std::int64_t kHeartbeat = 1'000;
constexpr std::int64_t kCoordinatorTimeout = 5'000;
constexpr std::int64_t kBusyBackoff = 1'000;  // a peer told "busy" tries again after this
// The daemon's (coordinator/server.h): a message waits out the commit
// window before its turn; with no message, time passes every tick (the
// poll's timeout).
constexpr std::int64_t kCommitWindow = 8;
constexpr std::int64_t kTick = coordinator::kDefaultTick.count();
// Per thousand reports: a delta the store refuses (an event id the fork's
// history holds already), which the coordinator records without it.
constexpr std::uint32_t kRefusedDeltas = 10;
constexpr std::uint32_t kAttemptFailures = 20;  // per thousand: the worker cannot run it
// The client submits a large job in parts of this many trials, as
// `forktrial submit` does.
constexpr std::uint32_t kPartTrials = 10'000;
// The parent run's events; each job forks at one of them.
constexpr int kForkPoints = 8;
const std::string kParentRun = "run_sim";
const std::string kClientRoute = "client";

// What a client's request asked, in the low bits of its id: the reply says
// which request it answers.
enum class Asked : std::uint8_t { submit, cancel, greet };
constexpr int kAskedBits = 4;
// The request id of a simulated worker's report (a failure's is 0, as the
// worker's): its acknowledgement is told apart by it.
constexpr std::uint64_t kReportRequest = 1;

Asked asked_of(std::uint64_t request) {
  return static_cast<Asked>(request & ((1u << kAskedBits) - 1));
}

// A frame on the simulated network.
struct Packet {
  std::uint32_t worker = 0;
  std::uint64_t route = 0;  // the worker's connection it comes from or goes to
  std::string frame;
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
  store_room,
  submit,
  cancel,
};

struct Event {
  std::int64_t at = 0;
  std::uint64_t seq = 0;
  EventKind kind = EventKind::tick;
  std::uint32_t who = 0;      // a worker's or a job's index
  std::uint64_t tag = 0;      // a wake's generation
  std::uint32_t message = 0;  // index in the packet pool
  friend bool operator>(const Event& a, const Event& b) {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }
};

using worker::AttemptKey;
using worker::WorkerSession;
using SessionTime = WorkerSession::Clock::time_point;

SessionTime session_time(std::int64_t ms) {
  return SessionTime{std::chrono::milliseconds(ms)};
}

std::int64_t ms_of(SessionTime at) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
}

struct Held {
  std::int64_t start = -1;  // -1 while waiting for a slot
  std::int64_t finish = -1;
};

// A simulated worker: the real worker's session (worker/session.h), with
// trials that take a drawn time in its slots instead of running.
struct Worker {
  std::uint32_t index = 0;
  WorkerId id;
  std::uint32_t slots = 1;
  std::uint32_t prefetch = 0;
  bool up = false;
  std::uint64_t route = 0;
  std::int64_t stalled_until = 0;
  std::unique_ptr<WorkerSession> session;
  std::uint32_t started = 0;
  std::map<AttemptKey, Held> held;
  std::set<AttemptKey> refused_deltas;  // reports sent whose delta the store will refuse
  std::uint64_t generation = 0;         // of its pending wake
  std::int64_t wake_at = -1;
};

// A job of the plan, and its client's view of it.
struct JobPlan {
  JobId id;
  std::string token;
  int priority = 0;
  std::uint32_t size = 0;
  int fork_point = 1;
  std::int64_t submit_at = 0;
  std::int64_t cancel_at = -1;
  bool submit_due = false;
  std::int64_t submit_next = 0;  // asked again then, when unanswered or refused
  bool submitted = false;        // acknowledged
  bool cancel_due = false;
  std::int64_t cancel_next = 0;
  bool cancelled = false;  // acknowledged
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

std::string event_id(int n) {
  char id[16];
  std::snprintf(id, sizeof id, "evt_%03d", n);
  return id;
}

// The parent's events are stamped in the simulation's first hour; a delta's
// after them.
constexpr std::string_view kParentTime = "1970-01-01T00:00:00.000Z";
constexpr std::string_view kDeltaTime = "1970-01-01T01:00:00.000Z";

AttemptRef ref_of(schema::wire::TrialRef::Reader ref) {
  return {TrialId{JobId(wire::text(ref.getJob())), ref.getIndex()}, ref.getAttempt()};
}

// The store the simulated coordinator starts from: the parent run, and the
// archive of the pack every trial proposes. Returns a trial's submitted text
// for each fork point (index 1..kForkPoints).
std::vector<std::string> prepare_store(const std::filesystem::path& dir,
                                       const std::filesystem::path& store_path) {
  const std::filesystem::path pack_dir = dir / "pack";
  std::filesystem::create_directories(pack_dir);
  std::ofstream(pack_dir / "pack.lua") << "-- a candidate the simulated workers never run\n";
  auto archive = pack::archive_pack(pack_dir);
  if (!archive) {
    throw Error(ErrorCode::internal,
                "cannot archive the simulation's pack: " + archive.error().message);
  }
  store::EventStore store(store_path);
  std::vector<store::NewEvent> history;
  for (int i = 1; i <= kForkPoints; ++i) {
    store::NewEvent event;
    event.id = store::EventId(event_id(i));
    event.type = "sim.step";
    event.payload = "{\"step\":" + std::to_string(i) + "}";
    event.timestamp = std::string(kParentTime);
    history.push_back(std::move(event));
  }
  auto imported = store.import_run({.id = store::RunId(kParentRun), .label = "sim"}, history);
  if (!imported) {
    throw Error(ErrorCode::internal,
                "cannot import the simulation's parent run: " + imported.error().message);
  }
  const Digest blob =
      store.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
  std::vector<std::string> trials(kForkPoints + 1);
  for (int i = 1; i <= kForkPoints; ++i) {
    trials[i] = R"({"candidate":"sim","spec":{"at_event":")" + event_id(i) +
                R"(","candidate":{"root_dir":")" + wire::bundle_root(blob) +
                R"(","expected_bundle_hash":")" + archive->bundle_hash.str() +
                R"("},"extra_packs":[],"label":"sim","limits":{},"parent_run_id":")" + kParentRun +
                R"(","scenario":"","schema_version":1}})";
  }
  return trials;
}

class Simulation {
 public:
  explicit Simulation(const Config& config)
      : config_(config), rng_(config.seed), store_path_(config.store_dir / "store") {
    report_.seed = config.seed;
    trials_ = prepare_store(config.store_dir, store_path_);
    core_config_.store = store_path_;
    core_config_.scheduler = config.scheduler;
    core_config_.durable = false;
    core_config_.compact_log_after = config.compact_log_after;
    core_config_.compact_log_ratio = config.compact_log_ratio;
    core_config_.committed = [this](std::span<const OrchestrationRecord> records) {
      committed(records);
    };
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
    plan_faults();
    start_coordinator();
    push({kTick, 0, EventKind::tick});
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
    if (core_) {
      for (const JobStatus& job : core_->scheduler().jobs()) {
        report_.reconciled += job.count(TrialStatus::reconciled);
        report_.abandoned += job.count(TrialStatus::abandoned);
        report_.cancelled += job.count(TrialStatus::cancelled);
      }
    }
    {
      Scope scope(config_.coordinator_scope);
      core_.reset();
    }
    note_log_generation();
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
  // ---- randomness and bookkeeping

  std::uint64_t roll(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(std::uint32_t per_thousand) { return roll(1000) < per_thousand; }
  bool chaos() const { return now_ < config_.faults.chaos.count(); }

  void mix(std::uint64_t value) {
    trace_ ^= value;
    trace_ *= 0x100000001b3ULL;
  }

  void mix(std::string_view bytes) {
    for (const char c : bytes) mix(static_cast<unsigned char>(c));
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

  std::uint32_t store_packet(Packet packet) {
    if (!free_.empty()) {
      const std::uint32_t index = free_.back();
      free_.pop_back();
      pool_[index] = std::move(packet);
      return index;
    }
    pool_.push_back(std::move(packet));
    return static_cast<std::uint32_t>(pool_.size() - 1);
  }

  Packet take_packet(std::uint32_t index) {
    Packet packet = std::move(pool_[index]);
    pool_[index].frame.clear();
    pool_[index].frame.shrink_to_fit();
    free_.push_back(index);
    return packet;
  }

  std::uint64_t request_id(Asked asked, std::uint64_t extra = 0) {
    return (++requests_ << 24 | extra << kAskedBits) | static_cast<std::uint64_t>(asked);
  }

  // A frame on the network: lost, delivered once or twice, each after its
  // own delay.
  void send(EventKind direction, const Packet& packet) {
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
      push({now_ + delay, 0, direction, packet.worker, 0, store_packet(packet)});
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
      char token[17];
      std::snprintf(token, sizeof token, "%016x", j + 1);
      job.token = token;
      job.id = JobId{"job_" + job.token};
      job.priority = static_cast<int>(roll(3));
      job.fork_point = static_cast<int>(1 + roll(kForkPoints));
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
        Packet packet = take_packet(event.message);
        if (!core_) return;  // nobody listens
        inbox_.push_back({"w" + std::to_string(packet.worker) + "." + std::to_string(packet.route),
                          std::move(packet.frame)});
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
      case EventKind::store_full: {
        // The coordinator's disk fills, then has room again: its commits
        // fail meanwhile, as a real full disk's do.
        ++report_.store_full_episodes;
        const std::int64_t until = now_ + 2'000 + static_cast<std::int64_t>(roll(15'000));
        full_until_ = std::max(full_until_, until);
        if (core_) core_->world().set_free_bytes(store_path_, 0);
        push({until, 0, EventKind::store_room});
        return;
      }
      case EventKind::store_room:
        if (now_ >= full_until_ && core_) {
          core_->world().set_free_bytes(store_path_, std::uint64_t{1} << 40);
        }
        return;
      case EventKind::submit:
        jobs_[event.who].submit_due = true;
        return schedule_turn();
      case EventKind::cancel:
        jobs_[event.who].cancel_due = true;
        return schedule_turn();
    }
  }

  // ---- the coordinator: the shipped core, fed frames in virtual time

  void start_coordinator() {
    Scope scope(config_.coordinator_scope);
    core_ = std::make_unique<CoordinatorCore>(
        core_config_, quiet_, config_.seed * 1'000 + report_.coordinator_restarts, instant(now_));
    if (now_ < full_until_) core_->world().set_free_bytes(store_path_, 0);
  }

  // The daemon's loop: a message wakes it, the commit window gathers what
  // follows, and the turn takes them all; with none, its poll times out
  // and time passes.
  void schedule_turn() {
    if (turn_scheduled_ || !core_) return;
    turn_scheduled_ = true;
    push({now_ + kCommitWindow, 0, EventKind::turn});
  }

  void turn() {
    if (!core_) return;
    std::vector<CoordinatorCore::Frame> frames = std::move(inbox_);
    inbox_.clear();
    client_requests(frames);
    run_turn(frames);
  }

  void tick() {
    push({now_ + kTick, 0, EventKind::tick});
    if (core_) {
      std::vector<CoordinatorCore::Frame> frames;
      client_requests(frames);
      run_turn(frames);
    }
    if (violation_) return;
    check_counters();
    if (!chaos() && core_ && all_finished()) {
      check(invariants_.at_end(core_->scheduler(), archived_status()));
      finished_ = true;
    }
  }

  void run_turn(std::span<const CoordinatorCore::Frame> frames) {
    Frames replies;
    {
      Scope scope(config_.coordinator_scope);
      for (const auto& frame : frames) mix(frame.bytes);
      replies = core_->turn(frames, instant(now_));
    }
    for (auto& [route, frame] : replies) {
      mix(frame);
      deliver(route, std::move(frame));
    }
  }

  // Records one commit made durable, for the referee.
  void committed(std::span<const OrchestrationRecord> records) {
    ++report_.commits;
    report_.records += records.size();
    for (const OrchestrationRecord& record : records) {
      if (std::holds_alternative<TrialRequeued>(record)) ++report_.requeued;
      if (std::holds_alternative<WorkerLost>(record)) ++report_.workers_lost;
    }
    check(invariants_.committed(records));
  }

  bool all_finished() const {
    for (const JobPlan& job : jobs_) {
      if (job.size == 0) continue;
      if (!job.submitted) return false;
      const auto status = core_->scheduler().job_status(job.id);
      if (!status || !status->finished()) return false;
    }
    return true;
  }

  // The scheduler's counters agree with each other.
  void check_counters() {
    if (!core_) return;
    const Scheduler& scheduler = core_->scheduler();
    std::uint64_t leased = 0;
    for (const JobStatus& job : scheduler.jobs()) {
      std::uint64_t total = 0;
      for (const std::uint64_t count : job.counts) total += count;
      if (total != job.trials) return fail("job " + job.id.str() + "'s counts do not add up");
      leased += job.count(TrialStatus::leased);
    }
    std::uint64_t held = 0;
    for (const WorkerStatus& worker : scheduler.workers()) {
      if (!worker.alive && worker.leases > 0) {
        return fail("lost worker " + worker.id.str() + " holds leases");
      }
      if (worker.leases > worker.slots + worker.prefetch) {
        return fail("worker " + worker.id.str() + " holds more leases than it has room for");
      }
      held += worker.leases;
    }
    if (held != leased)
      fail("workers hold " + std::to_string(held) + " leases, jobs count " +
           std::to_string(leased));
  }

  // A reply of the coordinator: the referee reads it, then the network
  // carries it to its worker (the client's go straight to the client).
  void deliver(const std::string& route, std::string frame) {
    auto decoded = wire::decode(frame);
    if (!decoded) return fail("the coordinator sent a frame that does not decode");
    const auto envelope = decoded->envelope();
    if (envelope.isError() &&
        envelope.getError().getCode() == schema::wire::ErrorCode::UNAVAILABLE) {
      ++report_.busy_replies;
    }
    if (route == kClientRoute) return client_hears(envelope);
    if (envelope.isReportAck() && envelope.getRequestId() == kReportRequest) {
      const auto ack = envelope.getReportAck();
      const AttemptRef ref = ref_of(ack.getTrial());
      switch (ack.getVerdict()) {
        case WireVerdict::ACCEPTED:
          check(invariants_.report_acknowledged(ref.trial, ref.attempt));
          break;
        case WireVerdict::FENCED:
          ++report_.fenced;
          break;
        case WireVerdict::DUPLICATE:
          ++report_.duplicates;
          break;
        case WireVerdict::REFUSED:
          ++report_.refused;
          break;
        default:
          break;
      }
    }
    // "w<index>.<connection>"
    std::uint32_t worker = 0;
    std::uint64_t connection = 0;
    const auto dot = route.find('.');
    if (route.size() < 2 || route[0] != 'w' || dot == std::string::npos ||
        std::from_chars(route.data() + 1, route.data() + dot, worker).ec != std::errc() ||
        std::from_chars(route.data() + dot + 1, route.data() + route.size(), connection).ec !=
            std::errc() ||
        worker >= workers_.size()) {
      return fail("the coordinator replied to a route no peer has: " + route);
    }
    send(EventKind::to_worker, Packet{worker, connection, std::move(frame)});
  }

  // ---- the client: submits the plan's jobs (in parts), cancels one

  void client_requests(std::vector<CoordinatorCore::Frame>& frames) {
    bool greeted = false;
    auto greet = [&] {
      if (greeted) return;
      greeted = true;
      wire::MessageBuilder message;
      wire::start(message, request_id(Asked::greet)).setClientHello();
      frames.push_back({kClientRoute, wire::encode(message)});
    };
    for (std::uint32_t j = 0; j < jobs_.size(); ++j) {
      JobPlan& job = jobs_[j];
      if (job.submit_due && !job.submitted && now_ >= job.submit_next) {
        greet();
        const std::uint32_t parts =
            std::max<std::uint32_t>(1, (job.size + kPartTrials - 1) / kPartTrials);
        for (std::uint32_t part = 0; part < parts; ++part) {
          const std::uint32_t first = part * kPartTrials;
          const std::uint32_t count = std::min(kPartTrials, job.size - first);
          wire::MessageBuilder message;
          auto submit = wire::start(message, request_id(Asked::submit, j)).initSubmitJob();
          submit.setName("job " + std::to_string(j));
          submit.setPriority(job.priority);
          submit.setToken(job.token);
          submit.setPart(part);
          submit.setParts(parts);
          auto specs = submit.initSpecs(count);
          const std::string& trial = trials_[job.fork_point];
          for (std::uint32_t i = 0; i < count; ++i) specs.set(i, trial);
          frames.push_back({kClientRoute, wire::encode(message)});
        }
        // Asked again if no answer comes (the coordinator went down).
        job.submit_next = now_ + kCoordinatorTimeout;
      }
      if (job.cancel_due && job.submitted && !job.cancelled && now_ >= job.cancel_next) {
        greet();
        wire::MessageBuilder message;
        wire::start(message, request_id(Asked::cancel, j)).initCancelJob().setJob(job.id.str());
        frames.push_back({kClientRoute, wire::encode(message)});
        job.cancel_next = now_ + kCoordinatorTimeout;
      }
    }
  }

  void client_hears(Envelope::Reader envelope) {
    const std::uint64_t request = envelope.getRequestId();
    const Asked asked = asked_of(request);
    if (asked == Asked::greet) {
      if (!envelope.isOk()) fail("the client's hello was not answered ok");
      return;
    }
    const auto j = static_cast<std::uint32_t>((request >> kAskedBits) & 0xfffff);
    if (j >= jobs_.size()) return fail("a reply to the client names no request of it");
    JobPlan& job = jobs_[j];
    if (envelope.isError()) {
      const auto error = envelope.getError();
      if (error.getCode() != schema::wire::ErrorCode::UNAVAILABLE) {
        return fail("the client's request for " + job.id.str() +
                    " was refused: " + wire::text(error.getMessage()));
      }
      if (asked == Asked::submit) job.submit_next = now_ + kBusyBackoff;
      if (asked == Asked::cancel) job.cancel_next = now_ + kBusyBackoff;
      return;
    }
    if (asked == Asked::submit && envelope.isJobAccepted()) {
      if (wire::text(envelope.getJobAccepted().getJob()) != job.id.str() ||
          envelope.getJobAccepted().getTotal() != job.size) {
        return fail("job " + job.id.str() + " was accepted under another id or size");
      }
      if (!job.submitted) {
        job.submitted = true;
        invariants_.job_acknowledged(job.id);
      }
    } else if (asked == Asked::cancel && envelope.isJobStatus()) {
      job.cancelled = true;
    }
  }

  // The generation of the log's last snapshot, from the store.
  void note_log_generation() {
    store::EventStore store(store_path_);
    auto snapshot = store.snapshot();
    const auto log = snapshot.run(coordinator::kOrchestrationRun);
    if (!log) return;
    snapshot.for_each_event(*log, 1, [&](const store::EventView& event) {
      if (auto marker = log_snapshot_of(event)) {
        report_.log_generation = std::max(report_.log_generation, marker->generation);
        return false;
      }
      return event.type != coordinator::kSnapshotType;
    });
  }

  // ---- crashes and restarts of the coordinator

  void coordinator_crash() {
    if (!core_) return;
    ++report_.coordinator_restarts;
    // The referee's copy of the state, charged to the simulation.
    if (config_.compare_replay) {
      crashed_state_ = core_->scheduler().state_text();
      crashed_answers_ = core_->scheduler().query_text();
    }
    {
      Scope scope(config_.coordinator_scope);
      core_.reset();
    }
    inbox_.clear();
    turn_scheduled_ = false;
    push(
        {now_ + 1'000 + static_cast<std::int64_t>(roll(4'000)), 0, EventKind::coordinator_restart});
  }

  // The coordinator starts again from its log, as the daemon does. Before
  // it does, the log is replayed apart and compared with the state that
  // crashed: everything decided was committed before the crash.
  void coordinator_restart() {
    if (core_) return;
    if (!crashed_state_.empty()) {
      // The referee's own replay, charged to the simulation.
      Scheduler replayed(config_.scheduler);
      std::optional<LogSnapshot> compacted;
      {
        store::EventStore store(store_path_);
        auto snapshot = store.snapshot();
        auto read = read_log(
            snapshot, [&](OrchestrationRecord&& record) { replayed.replay(std::move(record)); },
            [&](const store::EventView& event) {
              if (auto marker = log_snapshot_of(event)) compacted = marker;
            });
        if (!read) return fail("the log does not replay: " + read.error().message);
      }
      // A log replaced by a snapshot rebuilds a state that answers alike,
      // with its own numbering (Scheduler::snapshot); a log as written, the
      // very state.
      if (compacted) {
        report_.log_generation = std::max(report_.log_generation, compacted->generation);
        if (replayed.query_text() != crashed_answers_) {
          fail(
              "the scheduler restored from the log's snapshot answers otherwise than the one "
              "that crashed");
        }
      } else if (replayed.state_text() != crashed_state_) {
        fail("the scheduler replayed from the log differs from the one that crashed");
      }
      crashed_state_.clear();
      crashed_state_.shrink_to_fit();
      crashed_answers_.clear();
      crashed_answers_.shrink_to_fit();
    }
    start_coordinator();
    check(invariants_.after_restart(core_->scheduler(), archived_status()));
  }

  Invariants::ArchivedStatus archived_status() const {
    return [this](const TrialId& trial) { return core_->archived_status(trial); };
  }

  // ---- the workers: the real worker's session, with simulated trials

  void worker_restart(Worker& w) {
    if (w.up) return;
    w.up = true;
    w.route = ++routes_made_;
    w.stalled_until = 0;
    w.held.clear();
    w.refused_deltas.clear();
    w.started = 0;
    worker::SessionConfig session;
    session.worker_id = w.id.str();
    session.slots = w.slots;
    session.prefetch = w.prefetch;
    session.heartbeat = std::chrono::milliseconds(kHeartbeat);
    session.coordinator_timeout = std::chrono::milliseconds(kCoordinatorTimeout);
    const std::uint32_t index = w.index;
    w.session = std::make_unique<WorkerSession>(
        std::move(session),
        [this, index](const std::string& frame) {
          send(EventKind::to_coordinator, Packet{index, workers_[index].route, frame});
          return true;
        },
        quiet_, session_time(now_));
    w.session->start(session_time(now_));
    schedule_wake(w);
  }

  void worker_crash(Worker& w) {
    if (!w.up) return;
    ++report_.worker_crashes;
    w.up = false;
    w.session.reset();
    ++w.generation;
    push({now_ + 1'000 + static_cast<std::int64_t>(roll(9'000)), 0, EventKind::worker_restart,
          w.index});
  }

  // What a trial of the simulation reports: one event, as a trivial trial
  // appends, or, for a share of them, an event id the fork's history holds
  // (the parent's first), which the store refuses.
  static std::string report_frame(const AttemptKey& key, Outcome outcome, bool refused_delta,
                                  std::int64_t took) {
    wire::MessageBuilder message;
    auto report = wire::start(message, kReportRequest).initReport();
    worker::set_ref(report.initTrial(), key);
    report.setOutcome(static_cast<schema::TrialOutcome>(std::to_underlying(outcome)));
    report.setIsolation(schema::wire::IsolationLevel::STANDARD);
    report.setDurationMillis(static_cast<std::uint64_t>(took));
    auto event = report.initEvents(1)[0];
    event.setId(refused_delta ? event_id(1) : "evt_sim");
    event.setType("sim.done");
    event.setPayload("{}");
    event.setTimestamp(std::string(kDeltaTime));
    event.getActor().setActorName("sim");
    return wire::encode(message);
  }

  void worker_receives(const Event& event) {
    Worker& w = workers_[event.who];
    if (!w.up || pool_[event.message].route != w.route) {
      take_packet(event.message);  // its connection is gone
      return;
    }
    if (now_ < w.stalled_until) {
      push({w.stalled_until, 0, EventKind::to_worker, w.index, 0, event.message});
      return;
    }
    const Packet packet = take_packet(event.message);
    auto decoded = wire::decode(packet.frame);
    if (!decoded) return fail("worker " + w.id.str() + " got a frame that does not decode");
    const auto envelope = decoded->envelope();
    if (envelope.isReportAck()) {
      const auto ack = envelope.getReportAck();
      auto bad = w.refused_deltas.find(worker::attempt_key(ack.getTrial()));
      if (bad != w.refused_deltas.end()) {
        if (ack.getVerdict() == WireVerdict::ACCEPTED) ++report_.deltas_refused;
        w.refused_deltas.erase(bad);
      }
    }
    switch (w.session->receive(envelope, session_time(now_))) {
      case worker::Received::done:
        break;
      case worker::Received::assignments:
        for (auto a : envelope.getAssignments().getAssignments()) {
          const AttemptKey key = worker::attempt_key(a.getTrial());
          if (w.session->holds(key)) continue;  // sent again
          w.session->hold(key);
          w.held.try_emplace(key);
        }
        break;
      case worker::Received::stop:
        for (auto stopped : envelope.getStopTrials().getTrials()) {
          const AttemptKey key = worker::attempt_key(stopped);
          auto it = w.held.find(key);
          if (it == w.held.end()) continue;
          if (it->second.start >= 0) --w.started;
          w.held.erase(it);
          w.session->release(key);
        }
        break;
      case worker::Received::refused:
        return fail("worker " + w.id.str() + " was refused: " + *w.session->refusal());
      case worker::Received::error:
        return fail("worker " + w.id.str() + "'s message was answered with an error: " +
                    wire::text(envelope.getError().getMessage()));
      case worker::Received::blob_chunk:
      case worker::Received::unknown:
        return fail("worker " + w.id.str() + " got a message it never asked for");
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
      const AttemptKey& key = it->first;
      const std::int64_t took = it->second.finish - it->second.start;
      std::string frame;
      if (chance(kAttemptFailures)) {
        frame = worker::failure_frame(key, "could not run");
      } else {
        const bool refused_delta = chance(kRefusedDeltas);
        if (refused_delta) w.refused_deltas.insert(key);
        frame = report_frame(key, kOutcomes[roll(kOutcomes.size())], refused_delta, took);
      }
      w.session->finished(key, std::move(frame), std::chrono::milliseconds(took));
      --w.started;
      it = w.held.erase(it);
    }
    // Held assignments start as slots free up, the first to arrive first.
    for (auto& [ref, held] : w.held) {
      if (w.started >= w.slots) break;
      if (held.start >= 0) continue;
      const auto span =
          static_cast<std::uint64_t>(config_.trial_max.count() - config_.trial_min.count() + 1);
      held.start = now_;
      held.finish = now_ + config_.trial_min.count() + static_cast<std::int64_t>(roll(span));
      ++w.started;
    }
    w.session->step(session_time(now_));
    schedule_wake(w);
  }

  // The worker's next timer: a trial finishing, or its session's next step
  // (a heartbeat, a silence to notice, an offer to make or repeat).
  void schedule_wake(Worker& w) {
    std::int64_t at = std::max(now_ + 1, w.stalled_until);
    if (now_ >= w.stalled_until) {
      std::int64_t next = ms_of(w.session->next_step());
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
  const Log quiet_ = [](LogLevel, const std::string&) {};
  std::mt19937_64 rng_;
  std::filesystem::path store_path_;
  std::vector<std::string> trials_;  // a trial's submitted text, by fork point
  Invariants invariants_;
  Report report_;
  std::optional<std::string> violation_;
  bool finished_ = false;
  std::int64_t now_ = 0;
  std::int64_t give_up_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t trace_ = 0xcbf29ce484222325ULL;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  std::vector<Packet> pool_;
  std::vector<std::uint32_t> free_;
  std::vector<JobPlan> jobs_;
  std::vector<Worker> workers_;
  std::uint64_t routes_made_ = 0;

  // The coordinator: the shipped core on the store (its disk).
  ServerConfig core_config_;
  std::unique_ptr<CoordinatorCore> core_;
  std::int64_t full_until_ = -1;
  bool turn_scheduled_ = false;
  std::vector<CoordinatorCore::Frame> inbox_;
  std::string crashed_state_;
  std::string crashed_answers_;  // its query_text
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
