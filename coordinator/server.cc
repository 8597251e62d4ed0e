#include "coordinator/server.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <zmq.hpp>

#include "base/memory.h"
#include "base/text.h"
#include "base/timestamp.h"
#include "coordinator/activity.h"
#include "coordinator/candidate_ranking.h"
#include "coordinator/metrics.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/status_page.h"
#include "coordinator/upload_spool.h"
#include "pack/bundle_archive.h"
#include "sandbox/delta.h"
#include "sandbox/trial_types.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "transport/metrics_endpoint.h"
#include "transport/zap.h"

namespace forktrial::coordinator {
namespace {

using nlohmann::ordered_json;
using schema::wire::Envelope;
using WireCode = wire::ErrorCode;

constexpr std::string_view kResultType = "trial.result";

// The messages only a worker sends; every other one is a client's.
bool worker_message(Envelope::Which which) {
  switch (which) {
    case Envelope::WORKER_HELLO:
    case Envelope::REQUEST_WORK:
    case Envelope::HEARTBEAT:
    case Envelope::REPORT:
    case Envelope::ATTEMPT_FAILED:
    case Envelope::FETCH_BLOB:
      return true;
    default:
      return false;
  }
}
constexpr std::size_t kMaxMessagesPerTurn = 256;
constexpr std::size_t kMaxWorkerIdBytes = 256;
// How long a worker's offer of slots waits for work before it is answered
// empty (the worker offers again at once).
constexpr auto kParkLimit = std::chrono::seconds(1);
// The most of a peer's text the coordinator keeps (docs/wire-protocol.md,
// "Text from a peer"); a verdict's bounds are sandbox/delta.h's.
constexpr std::size_t kMaxIsolationBytes = std::size_t{16} << 10;
constexpr std::size_t kMaxReasonBytes = std::size_t{4} << 10;
constexpr std::size_t kMaxJobNameBytes = 256;
// A full store is tried again once its disk has this much room, first after
// a second, then less and less often while the tries fail.
constexpr std::uint64_t kResumeFreeBytes = std::uint64_t{4} << 20;
constexpr auto kLongestProbe = std::chrono::seconds(60);
constexpr auto kStillFullLog = std::chrono::seconds(30);

// The messages that need a write to the store to be answered: a worker's
// (fetching a blob aside) and a client's submission, cancellation or upload.
bool writes(Envelope::Which which) {
  if (worker_message(which)) return which != Envelope::FETCH_BLOB;
  return which == Envelope::SUBMIT_JOB || which == Envelope::CANCEL_JOB ||
         which == Envelope::PUT_BLOB;
}

// The coordinator's store flushes each commit's meta page with the next
// commit: one disk flush per commit instead of two. A process crash still
// loses nothing committed, so nothing acknowledged; a power loss may undo the
// last commit, whose acknowledged reports then come back as lapsed leases and
// are run again (docs/decisions/0061-coordinator-cost-per-trial.md). A turn
// that accepted a submission or a cancel flushes the meta page too before it
// answers (flush()): a client told "accepted" finds its job after any crash,
// power loss included.
store::StoreOptions coordinator_store_options(World& world, const ServerConfig& config) {
  store::StoreOptions options;
  options.sync = config.durable;
  options.sync_meta = false;
  // A world whose disk is full refuses the commit, as a real full disk does.
  options.before_commit = [&world, store = config.store] {
    if (auto why = world.write_refused(store)) throw store::StoreFull(*why);
  };
  // Runs are stamped with the world's time.
  options.clock = [&world] {
    return format_timestamp(
        std::chrono::duration_cast<std::chrono::milliseconds>(world.wall_now().time_since_epoch())
            .count());
  };
  return options;
}

// The run a trial's attempt is recorded as: one per attempt, so a superseded
// attempt can never write into the fork of the one that replaced it.
store::RunId fork_run_of(const TrialId& trial, Attempt attempt) {
  return store::RunId("run_" + trial.job.str() + "_" + std::to_string(trial.index) + "_a" +
                      std::to_string(attempt));
}

// A trial's specification, parsed, with its canonical JSON.
struct ParsedSpec {
  sandbox::TrialSpecification spec;
  std::string canonical;
};

// Specifications are parsed once per distinct text: a matrix repeats one
// specification for every repeat, and a trial's is read again when it is
// leased. Bounded: emptied when full.
class SpecCache {
 public:
  std::expected<std::shared_ptr<const ParsedSpec>, std::string> parse(const std::string& text) {
    auto it = parsed_.find(text);
    if (it != parsed_.end()) return it->second;
    auto spec = sandbox::parse_trial_specification(text);
    if (!spec) return std::unexpected(spec.error().front());
    std::string canonical = sandbox::to_canonical_json(*spec);
    auto parsed =
        std::make_shared<const ParsedSpec>(ParsedSpec{std::move(*spec), std::move(canonical)});
    if (parsed_.size() >= kLimit) parsed_.clear();
    parsed_.emplace(text, parsed);
    return parsed;
  }

 private:
  static constexpr std::size_t kLimit = 4096;
  std::unordered_map<std::string, std::shared_ptr<const ParsedSpec>> parsed_;
};

// A trial as submitted: the specification (pack roots are bundles) and the
// candidate's name, for results.
struct SubmittedTrial {
  std::shared_ptr<const ParsedSpec> parsed;
  std::string candidate;

  const sandbox::TrialSpecification& spec() const { return parsed->spec; }
  const std::string& spec_json() const { return parsed->canonical; }
};

std::expected<SubmittedTrial, std::string> parse_submitted(const std::string& text,
                                                           SpecCache& specs) {
  auto doc = ordered_json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("spec") || !doc["spec"].is_object()) {
    return std::unexpected(std::string("a submitted trial is {\"candidate\", \"spec\"}"));
  }
  auto parsed = specs.parse(doc["spec"].dump());
  if (!parsed) return std::unexpected(parsed.error());
  const auto candidate = doc.find("candidate");
  if (candidate != doc.end() && !candidate->is_string()) {
    return std::unexpected(std::string("a submitted trial's \"candidate\" is a name (a string)"));
  }
  return SubmittedTrial{std::move(*parsed),
                        candidate == doc.end() ? "" : candidate->get<std::string>()};
}

// The payload this coordinator records for a trial:
// {"candidate":<name>,"spec":<canonical specification>}, the bytes an
// ordered_json of the two would dump.
std::string payload_of(const std::string& candidate, const std::string& spec_json) {
  return "{\"candidate\":" + ordered_json(candidate).dump() + ",\"spec\":" + spec_json + "}";
}

// The candidate's name, and where the specification's text starts, in a
// payload as payload_of writes it (and a client sends it):
// {"candidate":<string>,"spec":<object>}. nullopt for any other shape.
std::optional<std::pair<std::string, std::size_t>> split_payload(const std::string& text) {
  constexpr std::string_view head = "{\"candidate\":\"";
  constexpr std::string_view middle = ",\"spec\":";
  if (!text.starts_with(head) || !text.ends_with('}')) return std::nullopt;
  std::size_t end = head.size();
  bool escaped = false;
  for (; end < text.size(); ++end) {
    if (text[end] == '\\') {
      escaped = true;
      ++end;
    } else if (text[end] == '"') {
      break;
    }
  }
  if (end >= text.size() || text.compare(end + 1, middle.size(), middle) != 0) return std::nullopt;
  const std::size_t spec_at = end + 1 + middle.size();
  if (!escaped) return std::make_pair(text.substr(head.size(), end - head.size()), spec_at);
  auto name =
      ordered_json::parse(text.substr(head.size() - 1, end - head.size() + 2), nullptr, false);
  if (!name.is_string()) return std::nullopt;
  return std::make_pair(name.get<std::string>(), spec_at);
}

// A submitted trial read without parsing its JSON twice: the specification's
// text is cut out (split_payload); anything else is read by parse_submitted.
std::expected<SubmittedTrial, std::string> read_payload(const std::string& text, SpecCache& specs) {
  auto split = split_payload(text);
  if (!split) return parse_submitted(text, specs);
  auto& [candidate, spec_at] = *split;
  auto parsed = specs.parse(text.substr(spec_at, text.size() - 1 - spec_at));
  if (!parsed) return parse_submitted(text, specs);
  return SubmittedTrial{std::move(*parsed), std::move(candidate)};
}

// The candidate's name in a payload, without reading its specification.
std::string payload_candidate(const std::string& text) {
  if (auto split = split_payload(text)) return std::move(split->first);
  const auto doc = ordered_json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("candidate") || !doc["candidate"].is_string()) return "";
  return doc["candidate"].get<std::string>();
}

struct Peer {
  enum class Role { worker, client } role = Role::client;
  WorkerId worker;
};

// What a worker's hello said of its host.
struct WorkerInfo {
  std::vector<std::string> warnings;  // degraded nets, from its preflight
  ordered_json isolation;             // its guarantees
};

class Server {
 public:
  // Without `listen`, no endpoint: frames come in through take() and the
  // replies stay in the outbox for the caller (CoordinatorCore).
  Server(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log,
         bool listen = true)
      : config_(config),
        world_(config.world != nullptr ? *config.world : real_world()),
        stop_(stop),
        log_(log),
        store_(config.store, coordinator_store_options(world_, config)),
        uploads_(config.store / "uploads", config.uploads),
        scheduler_(config.scheduler) {
    if (listen) {
      socket_.emplace(context_, zmq::socket_type::router);
      socket_->set(zmq::sockopt::router_mandatory, 1);
      socket_->set(zmq::sockopt::sndtimeo, 100);
      socket_->set(zmq::sockopt::linger, 0);
      socket_->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(config.max_frame_bytes));
      if (config.curve_key) {
        // The handler is bound before the socket, which asks it about every
        // handshake from then on.
        zap_.emplace(context_, config.allowed, log);
        transport::make_curve_server(*socket_, *config.curve_key);
      }
      for (const auto& [key, admitted] : config.allowed) {
        if (!admitted.worker_id.empty()) bound_ids_.insert(admitted.worker_id);
      }
      socket_->bind(config.listen);
    }
    recover();
    if (listen && config.http) {
      auto routes = probes_.routes();
      routes.push_back(transport::metrics_route(metrics_.registry()));
      for (auto& route : status_page_routes(api_)) routes.push_back(std::move(route));
      http_.emplace(*config.http, std::move(routes), log);
      log_(LogLevel::info, "coordinator serving HTTP on http://" + http_->address().str() + "/");
    }
  }

  // The status API's requests waiting for this thread are answered 503.
  ~Server() { api_.close(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The wall clock, to the millisecond the records keep.
  Instant clock_now() { return std::chrono::time_point_cast<Duration>(world_.wall_now()); }

  int run() {
    log_(LogLevel::info, "coordinator listening on " + config_.listen);
    while (!stop_.cancelled()) {
      zmq::pollitem_t items[] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, stop_.fd(), ZMQ_POLLIN, 0},
                                 {nullptr, api_.fd(), ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 3, config_.tick);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;  // a signal: the loop looks at `stop`
      }
      const Instant now = clock_now();
      for (std::size_t i = 0; i < kMaxMessagesPerTurn && receive_one(now); ++i) {
      }
      gather();
      end_turn();
      // Between turns, with everything decided so far committed: the status
      // API's questions (docs/decisions/0067-status-page-asks-loop.md).
      api_.serve([this](const transport::HttpRequest& request) { return answer_api(request); });
    }
    api_.close();
    log_(LogLevel::info, "coordinator stopping");
    return 0;
  }

 private:
  // ---- persistence: every record is in the store before a peer hears of it.

  bool uncommitted() const { return !pending_.empty() || !reconciling_.empty(); }

  // What follows a turn's frames, in the daemon and in the core alike: the
  // probes learn the loop turned; time passes for the scheduler and the
  // parked offers (or, with the store full, the disk is looked at);
  // everything decided is committed and answered; a large submission's
  // memory goes back to the system.
  void end_turn() {
    probes_.turned();
    probes_.set_ready(!store_full_, store_full_ ? "the store is full: " + *store_full_ : "");
    if (store_full_) {
      probe_store();
    } else {
      keep_tick(clock_now());
      serve_parked(clock_now());
    }
    flush();
    if (trim_) {
      // A submission's message, its parse and its record are freed now:
      // give the memory back rather than keep it as the high water.
      give_back_freed_memory();
      trim_ = false;
    }
  }

  // Group commit: with something to commit, the messages that arrive within
  // the commit window are taken into the same transaction. The window is
  // slept through and what came is read at its end: one wake-up per turn
  // rather than one per message.
  void gather() {
    if (!uncommitted() || config_.commit_window.count() <= 0) return;
    const auto until = world_.monotonic_now() + config_.commit_window;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - world_.monotonic_now() + std::chrono::microseconds(999));
      if (left.count() <= 0 || stop_.cancelled()) break;
      zmq::pollitem_t items[] = {{nullptr, stop_.fd(), ZMQ_POLLIN, 0}};
      try {
        // zmq_poll counts in milliseconds: the wait is rounded up.
        zmq::poll(items, 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
    const Instant now = clock_now();
    for (std::size_t taken = 0; taken < kMaxMessagesPerTurn && receive_one(now); ++taken) {
    }
  }

  void keep(Records records) {
    for (auto& record : records) {
      activity_.note(record);
      pending_.push_back(std::move(record));
    }
    gauges_stale_ = true;
  }

  // Time passes for the scheduler: leases lapse, silent workers are lost;
  // and for the uploads: abandoned ones are dropped.
  void keep_tick(Instant now) {
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

  // What pending_ held is in the store now.
  void pending_committed() {
    metrics_.committed(pending_);
    pending_.clear();
  }

  void flush() {
    try {
      commit_turn();
      if (turn_durable_) store_.sync();
    } catch (const store::StoreFull& e) {
      store_full(e.what());
    }
    turn_durable_ = false;
    turn_writes_.clear();
    if (gauges_stale_) {
      metrics_.observe(scheduler_, store_full_.has_value());
      gauges_stale_ = false;
    }
    if (!socket_) return;  // the replies are the caller's (turn)
    for (auto& [route, frame] : outbox_) send_to(route, frame);
    outbox_.clear();
  }

  void commit_turn() {
    if (!reconciling_.empty() && !write_turn()) {
      std::vector<Reconciliation> alone;
      alone.swap(reconciling_);
      for (Reconciliation& r : alone) reconcile_alone(r);
    }
    if (!pending_.empty()) {
      auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
        return append_to_log(writer, pending_, {}, config_.job_chunk_bytes);
      });
      if (!written) {
        throw Error(forktrial::ErrorCode::internal,
                    "cannot write the orchestration log: " + written.error().message);
      }
      if (config_.committed) config_.committed(pending_);
      pending_committed();
    }
  }

  // ---- a full store: stop, lose nothing, resume when there is room.

  std::string busy_message() const {
    return "the coordinator's store is full (" + store_full_.value_or("") +
           "); it takes no writes until its disk has room: send this again later";
  }

  void reply_busy(const std::string& route, std::uint64_t request) {
    reply_error(route, request, WireCode::BUSY, busy_message());
  }

  // A commit failed for want of room. What it held was decided in memory
  // only and never told to anyone: it is undone by rebuilding the scheduler
  // from the log, and every reply of the turn becomes "busy" (the peer sends
  // again). Until a commit succeeds the coordinator leases nothing, reconciles
  // nothing and takes no job; leases do not lapse meanwhile, and on resuming
  // they are all renewed, as after a restart.
  void store_full(const std::string& why) {
    const bool already = store_full_.has_value();
    store_full_ = why;
    pending_.clear();
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

  // While full: once the disk has room, a commit is tried (every live
  // worker's leases renewed, as after a restart); when it fails again the
  // next try waits twice as long.
  void probe_store() {
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

 public:
  // One turn of the loop without the socket: `frame` from `route`, then time
  // passing to `now`, then the commit. Returns the turn's replies.
  // CoordinatorCore's turn: one frame, taken as run() takes what its socket
  // gives, then the same end of turn. The time is the world's.
  std::vector<std::pair<std::string, std::string>> turn(
      std::span<const CoordinatorCore::Frame> frames) {
    for (const auto& frame : frames) take(frame.route, frame.bytes, std::nullopt, clock_now());
    end_turn();
    return std::exchange(outbox_, {});
  }

  const Scheduler& scheduler() const { return scheduler_; }

 private:
  // A reply that cannot be delivered (the peer is gone: ROUTER_MANDATORY;
  // or it does not read: the send timeout) is counted and logged, never
  // dropped unseen. Nothing is lost with it: the decision is in the store,
  // a client asks again, a worker sends its report again after its next
  // hello, and an assignment it never heard of lapses with its lease.
  void send_to(const std::string& route, const std::string& frame) {
    std::string why;
    try {
      if (socket_->send(zmq::buffer(route), zmq::send_flags::sndmore) &&
          socket_->send(zmq::buffer(frame), zmq::send_flags::none)) {
        return;
      }
      why = "its queue is full";
    } catch (const zmq::error_t& e) {
      why = e.num() == EHOSTUNREACH ? "it is gone" : e.what();
    }
    ++undelivered_;
    metrics_.undelivered();
    auto it = peers_.find(route);
    const std::string who = it == peers_.end() ? "a peer"
                            : it->second.role == Peer::Role::worker
                                ? "worker " + it->second.worker.str()
                                : "a client";
    log_(LogLevel::warn, "a reply to " + who + " was not delivered (" + why + "); " +
                             std::to_string(undelivered_) + " so far");
  }

  void reply(const std::string& route, std::string frame) {
    outbox_.emplace_back(route, std::move(frame));
  }

  void reply_error(const std::string& route, std::uint64_t request, WireCode code,
                   const std::string& message) {
    ++errors_;
    metrics_.rejected(code);
    reply(route, wire::error_frame(request, code, message));
  }

  // ---- start-up

  void recover() {
    const std::uint64_t records = replay_log();
    metrics_.resync(scheduler_);
    keep(scheduler_.recover(clock_now()));
    flush();
    give_back_freed_memory();  // the log's text, read and decoded, is garbage now
    if (records > 0) {
      log_(LogLevel::info, "replayed " + std::to_string(records) + " orchestration records");
    }
  }

  // Applies the whole log to scheduler_, a new one, and to activity_;
  // returns how many records.
  std::uint64_t replay_log() {
    auto snapshot = store_.snapshot();
    std::uint64_t records = 0;
    activity_.clear();
    auto read = read_log(
        snapshot,
        [&](OrchestrationRecord&& record) {
          activity_.note(record);
          if (const auto* job = std::get_if<JobSubmitted>(&record)) note_job(*job);
          scheduler_.replay(std::move(record));  // after what reads it
          ++records;
        },
        [&](const store::EventView& event) {
          if (event.type == kResultType) remember_result(event);
        });
    if (!read)
      throw Error(forktrial::ErrorCode::internal,
                  "the orchestration log does not replay: " + read.error());
    return records;
  }

  // A job's trials have no result yet.
  void note_job(const JobSubmitted& job) {
    result_seqs_[job.job.str()].assign(job.trials.size(), 0);
  }

  // Where a trial's result is in the log: its results are read from the
  // store when asked for, not held (a million results would be a gigabyte).
  void remember_result(const store::EventView& event) {
    auto doc = ordered_json::parse(event.payload, nullptr, false);
    if (!doc.is_object() || !doc["job"].is_string() || !doc["index"].is_number_unsigned()) return;
    remember_result(
        TrialId{JobId(doc["job"].get<std::string>()), doc["index"].get<std::uint32_t>()},
        event.seq);
  }

  void remember_result(const TrialId& trial, std::uint64_t seq) {
    auto job = result_seqs_.find(trial.job.str());
    if (job != result_seqs_.end() && trial.index < job->second.size()) {
      job->second[trial.index] = seq;
    }
  }

  // The trial.result event of `trial`, if it has one.
  std::optional<std::string> stored_result(const TrialId& trial) {
    auto job = result_seqs_.find(trial.job.str());
    if (job == result_seqs_.end() || trial.index >= job->second.size() ||
        job->second[trial.index] == 0) {
      return std::nullopt;
    }
    const std::uint64_t seq = job->second[trial.index];
    auto snapshot = store_.snapshot();
    auto run = snapshot.run(kOrchestrationRun);
    if (!run) return std::nullopt;
    std::optional<std::string> payload;
    snapshot.for_each_event(*run, seq, [&](const store::EventView& event) {
      if (event.seq == seq && event.type == kResultType) payload = std::string(event.payload);
      return false;
    });
    return payload;
  }

  // ---- receiving

  bool receive_one(Instant now) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!socket_->recv(part, zmq::recv_flags::dontwait)) return false;
    const std::string route = part.to_string();
    std::string frame;
    std::optional<transport::Role> role;
    bound_id_.reset();
    client_.reset();
    std::size_t count = 1;
    while (part.more()) {
      if (!socket_->recv(part, zmq::recv_flags::none)) break;
      if (++count == 2) {
        frame = part.to_string();
        if (zap_) {
          role = transport::role_of(part);
          bound_id_ = transport::bound_worker_id(part);
          client_ = transport::client_of(part);
        }
      }
    }
    if (count != 2) {
      reply_error(route, 0, WireCode::MALFORMED, "a message is one frame");
      return true;
    }
    take(route, frame, role, now);
    return true;
  }

  // One frame from `route`, whose connection's key has `role` (with CURVE):
  // decoded, checked against the role, handled; every refusal answered.
  void take(const std::string& route, std::string_view frame, std::optional<transport::Role> role,
            Instant now) {
    auto decoded = wire::decode(frame, config_.max_frame_bytes);
    if (!decoded) return reply_error(route, 0, decoded.error().code, decoded.error().message);
    const auto envelope = decoded->envelope();
    if (zap_) {
      // What a connection may say follows its key's role, message by
      // message: a routing id a peer chose cannot borrow another's role.
      const auto needed =
          worker_message(envelope.which()) ? transport::Role::worker : transport::Role::client;
      if (role != needed) {
        const std::string has =
            role ? "a " + std::string(transport::role_name(*role)) + "'s" : "of no role";
        reply_error(route, envelope.getRequestId(), WireCode::REFUSED,
                    "this connection's key is " + has + ": a " +
                        std::string(transport::role_name(needed)) +
                        "'s message is refused (the coordinator's --allow-workers and "
                        "--allow-clients say which key is which)");
        return;
      }
    }
    try {
      handle(route, envelope, now);
    } catch (const store::StoreFull& e) {
      store_full(e.what());
      reply_busy(route, envelope.getRequestId());
    } catch (const kj::Exception& e) {
      reply_error(route, envelope.getRequestId(), WireCode::MALFORMED,
                  std::string("the message cannot be read: ") + e.getDescription().cStr());
    } catch (const nlohmann::json::exception& e) {
      reply_error(route, envelope.getRequestId(), WireCode::MALFORMED,
                  std::string("the message holds JSON that cannot be read: ") + e.what());
    }
  }

  void handle(const std::string& route, Envelope::Reader envelope, Instant now) {
    const std::uint64_t request = envelope.getRequestId();
    const auto which = envelope.which();
    if (which == Envelope::WORKER_HELLO) return on_worker_hello(route, envelope, now);
    if (which == Envelope::CLIENT_HELLO) {
      peers_[route] = Peer{Peer::Role::client, WorkerId("")};
      return reply_ok(route, request);
    }
    auto peer = peers_.find(route);
    if (peer == peers_.end()) {
      return reply_error(route, request, WireCode::OUT_OF_ORDER,
                         "say hello first (workerHello or clientHello)");
    }
    if (writes(which)) turn_writes_.emplace(route, request);
    if (store_full_ && writes(which)) {
      // A heartbeat is answered (no lease lapses while the store is full).
      if (which == Envelope::HEARTBEAT) return reply_ok(route, request);
      return reply_busy(route, request);
    }
    if (peer->second.role == Peer::Role::worker) {
      const WorkerId& worker = peer->second.worker;
      switch (which) {
        case Envelope::REQUEST_WORK:
          return on_request_work(route, worker, envelope, now);
        case Envelope::HEARTBEAT:
          return on_heartbeat(route, worker, envelope, now);
        case Envelope::REPORT:
          return on_report(route, worker, envelope, now);
        case Envelope::ATTEMPT_FAILED:
          return on_attempt_failed(route, worker, envelope, now);
        case Envelope::FETCH_BLOB:
          return on_fetch(route, envelope);
        default:
          return reply_error(route, request, WireCode::UNKNOWN_MESSAGE,
                             "a worker may not send this message");
      }
    }
    switch (which) {
      case Envelope::FIND_MISSING:
        return on_find_missing(route, envelope);
      case Envelope::PUT_BLOB:
        return on_put_blob(route, envelope, now);
      case Envelope::SUBMIT_JOB:
        return on_submit(route, envelope, now);
      case Envelope::STATUS_REQUEST:
        return on_status(route, envelope);
      case Envelope::CANCEL_JOB:
        return on_cancel(route, envelope, now);
      case Envelope::RESULTS_REQUEST:
        return on_results(route, envelope);
      case Envelope::WORKERS_REQUEST:
        return on_workers(route, request);
      default:
        return reply_error(route, request, WireCode::UNKNOWN_MESSAGE,
                           "a client may not send this message");
    }
  }

  void reply_ok(const std::string& route, std::uint64_t request) {
    capnp::MallocMessageBuilder message;
    wire::start(message, request).setOk();
    reply(route, wire::encode(message));
  }

  // ---- workers

  void on_worker_hello(const std::string& route, Envelope::Reader envelope, Instant now) {
    auto hello = envelope.getWorkerHello();
    // The id goes into the log and into every result: plain and short.
    const std::string id = wire::text(hello.getWorkerId());
    if (auto bad = named_text_problem("worker id", id, kMaxWorkerIdBytes)) {
      return reply_error(route, envelope.getRequestId(), WireCode::REFUSED,
                         *bad + "; start the worker with a plain --id");
    }
    // A key bound to a worker id joins under that id only, and a bound id
    // is taken by its key only: an admitted key cannot take over another
    // worker's leases by naming it.
    if (bound_id_ && *bound_id_ != id) {
      return reply_error(route, envelope.getRequestId(), WireCode::REFUSED,
                         "this worker's key may join only as worker " + *bound_id_ +
                             " (the coordinator's --allow-workers binds it); start the worker "
                             "with --id " +
                             *bound_id_);
    }
    if (!bound_id_ && bound_ids_.contains(id)) {
      return reply_error(route, envelope.getRequestId(), WireCode::REFUSED,
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
    // A live worker this process has not heard from yet is one that was
    // connected before this coordinator restarted: it keeps the leases
    // `recover` renewed, and its next heartbeat says which it still runs.
    // Otherwise a hello starts a new incarnation, ending the old one's.
    const auto known = scheduler_.worker_status(input.id);
    const bool reconnected = known && known->alive && !worker_routes_.contains(input.id);
    if (!reconnected) {
      if (store_full_) return reply_busy(route, envelope.getRequestId());
      auto joined = scheduler_.worker_joined(input, now);
      if (!joined) {
        return reply_error(route, envelope.getRequestId(), WireCode::REFUSED,
                           joined.error().message);
      }
      keep(std::move(*joined));
    }
    // A worker that joins again from a new connection leaves its old one.
    if (auto old = worker_routes_.find(input.id); old != worker_routes_.end()) {
      peers_.erase(old->second);
    }
    peers_[route] = Peer{Peer::Role::worker, input.id};
    worker_routes_[input.id] = route;
    // An offer the previous connection left waiting must not lease trials
    // to a route nobody reads.
    std::erase_if(parked_, [&](const auto& entry) { return entry.second.worker == input.id; });
    log_(LogLevel::info, "worker " + input.id.str() +
                             (reconnected ? " reconnected, keeping its leases," : " joined") +
                             " with " + std::to_string(input.slots) + " slots");
    WorkerInfo& info = worker_info_[input.id];
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
    capnp::MallocMessageBuilder message;
    wire::start(message, envelope.getRequestId())
        .initWelcome()
        .setLeaseMillis(static_cast<std::uint64_t>(config_.scheduler.lease_duration.count()));
    reply(route, wire::encode(message));
  }

  void on_request_work(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                       Instant now) {
    parked_.erase(route);
    const std::uint32_t free = envelope.getRequestWork().getFreeSlots();
    // A worker the scheduler does not hold alive is answered at once (with
    // outOfOrder, by assign), so that it says hello again.
    const auto status = scheduler_.worker_status(worker);
    if (free > 0 && scheduler_.queued_trials() == 0 && status && status->alive) {
      // Nothing to give: the offer waits here (long poll) until there is,
      // rather than the worker asking again and again.
      parked_[route] = Parked{worker, free, envelope.getRequestId(), world_.monotonic_now()};
      return;
    }
    assign(route, worker, free, envelope.getRequestId(), now);
  }

  // Offers waiting for work are answered when there is some, and answered
  // empty after kParkLimit, well inside the worker's patience.
  void serve_parked(Instant now) {
    const auto steady = world_.monotonic_now();
    for (auto it = parked_.begin(); it != parked_.end();) {
      const Parked& p = it->second;
      if (scheduler_.queued_trials() > 0 || steady - p.since >= kParkLimit) {
        assign(it->first, p.worker, p.free, p.request, now);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void assign(const std::string& route, const WorkerId& worker, std::uint32_t free,
              std::uint64_t request, Instant now) {
    auto work = scheduler_.request_work(worker, free, now);
    if (!work) return reply_error(route, request, WireCode::OUT_OF_ORDER, work.error().message);
    keep(std::move(work->records));
    capnp::MallocMessageBuilder message;
    auto list = wire::start(message, request)
                    .initAssignments()
                    .initAssignments(static_cast<unsigned>(work->assignments.size()));
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
      wire::set_digest(out.initSegment(), scheduler_.inputs(a.trial)->segment);
      auto packs = sandbox::packs_in_load_order(submitted.spec());
      auto bundles = out.initBundles(static_cast<unsigned>(packs.size()));
      for (unsigned p = 0; p < packs.size(); ++p) {
        wire::set_digest(bundles[p].initPin(), *packs[p]->expected_bundle_hash);
        wire::set_digest(bundles[p].initArchive(), *wire::archive_of_root(packs[p]->root_dir));
      }
      out.setLeaseExpiresMillis(a.expires.time_since_epoch().count());
    }
    reply(route, wire::encode(message));
  }

  void on_heartbeat(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                    Instant now) {
    std::vector<AttemptRef> running;
    for (auto ref : envelope.getHeartbeat().getRunning()) {
      running.push_back(
          {TrialId{JobId(wire::text(ref.getJob())), ref.getIndex()}, ref.getAttempt()});
    }
    auto beat = scheduler_.heartbeat(worker, running, now);
    if (!beat) {
      return reply_error(route, envelope.getRequestId(), WireCode::OUT_OF_ORDER,
                         beat.error().message);
    }
    keep(std::move(beat->records));
    // Always answered: a worker that hears nothing presumes a restart.
    if (beat->stale.empty()) return reply_ok(route, envelope.getRequestId());
    send_stop(route, beat->stale);
  }

  void send_stop(const std::string& route, const std::vector<AttemptRef>& trials) {
    capnp::MallocMessageBuilder message;
    auto list =
        wire::start(message, 0).initStopTrials().initTrials(static_cast<unsigned>(trials.size()));
    for (unsigned i = 0; i < trials.size(); ++i) {
      list[i].setJob(trials[i].trial.job.str());
      list[i].setIndex(trials[i].trial.index);
      list[i].setAttempt(trials[i].attempt);
    }
    reply(route, wire::encode(message));
  }

  using WireVerdict = schema::wire::ReportVerdict;

  static WireVerdict wire_verdict(ReportVerdict verdict) {
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

  void ack(const std::string& route, std::uint64_t request, schema::wire::TrialRef::Reader ref,
           WireVerdict verdict, std::string_view reason = {}) {
    ack(route, request, TrialId{JobId(wire::text(ref.getJob())), ref.getIndex()}, ref.getAttempt(),
        verdict, reason);
  }

  void ack(const std::string& route, std::uint64_t request, const TrialId& trial, Attempt attempt,
           WireVerdict verdict, std::string_view reason = {}) {
    capnp::MallocMessageBuilder message;
    auto out = wire::start(message, request).initReportAck();
    auto ref = out.initTrial();
    ref.setJob(trial.job.str());
    ref.setIndex(trial.index);
    ref.setAttempt(attempt);
    out.setVerdict(verdict);
    out.setReason(bounded_text(reason, 1024));
    reply(route, wire::encode(message));
  }

  // A trial as submitted, parsed once per lease rather than per message.
  const SubmittedTrial& submitted_trial(const TrialId& trial) {
    auto it = submitted_.find(trial);
    if (it != submitted_.end()) return it->second;
    auto parsed = read_payload(*scheduler_.payload(trial), specs_);
    if (!parsed) {
      throw Error(forktrial::ErrorCode::internal,
                  "trial " + trial.str() + " was recorded unreadable: " + parsed.error());
    }
    return submitted_.emplace(trial, std::move(*parsed)).first->second;
  }

  void on_attempt_failed(const std::string& route, const WorkerId& worker,
                         Envelope::Reader envelope, Instant now) {
    auto failed = envelope.getAttemptFailed();
    const TrialId trial{JobId(wire::text(failed.getTrial().getJob())),
                        failed.getTrial().getIndex()};
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

  void on_report(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                 Instant now) {
    auto report = envelope.getReport();
    const TrialId trial{JobId(wire::text(report.getTrial().getJob())),
                        report.getTrial().getIndex()};
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
          "'s report breaks the rules every delta is held to: " + reconciliation.error();
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

  // What a report says, copied out of its message.
  struct Reconciliation {
    std::string route;
    std::uint64_t request = 0;
    WorkerId worker;
    TrialId trial;
    Attempt attempt = 0;
    Instant at;
    sandbox::TrialVerdict verdict;
    std::vector<store::NewEvent> events;
    std::uint64_t duration_ms = 0;
    std::chrono::steady_clock::time_point received;  // for the reconciliation's latency
    sandbox::Isolation isolation = sandbox::Isolation::standard;
  };

  // The fork point's timestamp of a submitted trial, from the store.
  UnixMillis fork_point_time(const sandbox::TrialSpecification& spec) {
    auto snapshot = store_.snapshot();
    auto parent = snapshot.run(spec.parent_run_id);
    if (!parent) return 0;
    auto point = snapshot.find_event(*parent, spec.at_event);
    return point ? parse_timestamp(point->timestamp).value_or(0) : 0;
  }

  // What a report says, copied out of its message and held to the rules a
  // local parent holds its child's verdict and delta to (sandbox/delta.h
  // DeltaRules): the first rule broken is the error, and nothing is copied
  // past it. Prose is repaired and bounded (docs/wire-protocol.md).
  std::expected<Reconciliation, std::string> reconciliation_of(
      const std::string& route, std::uint64_t request, const WorkerId& worker, const TrialId& trial,
      Attempt attempt, schema::wire::Report::Reader report, Instant now) {
    Reconciliation r{route,
                     request,
                     worker,
                     trial,
                     attempt,
                     now,
                     {},
                     {},
                     report.getDurationMillis(),
                     world_.monotonic_now()};
    sandbox::TrialVerdict& verdict = r.verdict;
    // An enum holds whatever number the peer wrote.
    const auto outcome_ordinal = static_cast<std::uint16_t>(report.getOutcome());
    auto outcome = outcome_from_ordinal(outcome_ordinal);
    if (!outcome) {
      return std::unexpected("outcome " + std::to_string(outcome_ordinal) +
                             " is not one forktrial has");
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
        return std::unexpected("its isolation " +
                               std::to_string(static_cast<std::uint16_t>(report.getIsolation())) +
                               " is neither standard nor strict");
    }
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
    if (verdict.wall_clock_killed &&
        (verdict.outcome != Outcome::limits_exceeded || !verdict.stopped_by_net)) {
      return std::unexpected(
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
      if (const auto& cut = rules.check(view)) return std::unexpected(cut->reason);
      r.events.push_back(static_cast<store::NewEvent>(view.to_event()));
    }
    return r;
  }

  // Writes one reconciliation into `writer`: the fork with the reported
  // delta (the first `count` events; none when the store refused them), and
  // its trial.reconciled record and trial.result event into `records` and
  // `results`. It changes nothing outside the store: a transaction body may
  // run again.
  store::Result<std::uint64_t> record_reconciliation(store::Writer& writer, const Reconciliation& r,
                                                     const sandbox::TrialVerdict& v,
                                                     std::uint64_t count, Records& records,
                                                     std::vector<store::NewEvent>& results) {
    const SubmittedTrial& submitted = submitted_trial(r.trial);
    const store::RunId fork_id = fork_run_of(r.trial, r.attempt);
    const store::NewRun fork{.id = fork_id, .label = submitted.spec().label};
    auto recorded = sandbox::record_trial(writer, submitted.spec(), fork, count,
                                          sandbox::delta_of(r.events), v);
    if (!recorded) return recorded;
    records.push_back(TrialReconciled{r.trial, r.attempt, v.outcome, r.at});
    auto run = writer.run(fork_id);
    const std::uint64_t fork_seq = run->fork_of ? run->fork_of->seq : 0;
    ordered_json result = result_json(r.trial, r.attempt, submitted, v, r.worker);
    result["fork_run_id"] = fork_id.str();
    result["events_appended"] = run->head - fork_seq;
    result["behavior_failures"] = writer.events_of_type(*run, "behavior.failed").size();
    result["behavior_failures_after_fork"] =
        writer.events_of_type(*run, "behavior.failed", fork_seq).size();
    result["duration_ms"] = r.duration_ms;
    // What isolation the trial had, as its worker ran it and its warnings say.
    result["isolation"] = ordered_json::parse(sandbox::isolation_json(
        sandbox::trial_isolation(r.isolation, submitted.spec().limits, v.warnings)));
    // The store is the record: say when the child claimed otherwise.
    std::string detail = result["detail"];
    sandbox::append_detail_line(
        detail, sandbox::claim_disagreement(v, result["events_appended"],
                                            result["behavior_failures_after_fork"]));
    result["detail"] = detail;
    store::NewEvent event;
    event.type = kResultType;
    event.payload = result.dump();
    event.timestamp = format_timestamp(r.at.time_since_epoch().count());
    event.actor = std::string(kCoordinatorActor);
    results.push_back(std::move(event));
    return recorded;
  }

  // After the commit that recorded `r` (with `v`): the scheduler, the
  // results and the worker hear of it.
  void reconciled(const Reconciliation& r, const sandbox::TrialVerdict& v,
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

  // The turn's one transaction: every record kept so far and every report
  // accepted this turn. When the store refuses it (a report whose delta it
  // will not take), each report is recorded by itself instead, so one bad
  // report costs only its own delta.
  bool write_turn() {
    std::vector<store::NewEvent> results;
    Records records;
    auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
      records = pending_;
      results.clear();
      for (const Reconciliation& r : reconciling_) {
        const std::uint64_t count = r.events.size();
        auto recorded = record_reconciliation(writer, r, r.verdict, count, records, results);
        if (!recorded) return recorded;
      }
      return append_to_log(writer, records, results, config_.job_chunk_bytes);
    });
    if (!written) return false;
    if (config_.committed) config_.committed(records);
    pending_committed();
    // The results are the log's last events.
    const std::uint64_t first_result = *written - results.size() + 1;
    for (std::size_t i = 0; i < reconciling_.size(); ++i) {
      reconciled(reconciling_[i], reconciling_[i].verdict, first_result + i);
    }
    reconciling_.clear();
    return true;
  }

  // One report in a transaction of its own (with the records kept so far):
  // its delta if the store takes it, else the fork without it, else the
  // attempt failed.
  void reconcile_alone(Reconciliation& r) {
    auto write = [&](const sandbox::TrialVerdict& v, std::uint64_t count) {
      std::vector<store::NewEvent> results;
      Records records;
      auto written = store_.write([&](store::Writer& writer) -> store::Result<std::uint64_t> {
        records = pending_;
        results.clear();
        auto recorded = record_reconciliation(writer, r, v, count, records, results);
        if (!recorded) return recorded;
        return append_to_log(writer, records, results, config_.job_chunk_bytes);
      });
      if (written) {
        if (config_.committed) config_.committed(records);
        pending_committed();
        reconciled(r, v, *written);  // its result is the log's last event
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
               .reconcile_failed(r.trial,
                                 "the store refused the report: " + written.error().message, r.at)
               .value_or(Records{}));
      submitted_.erase(r.trial);
      ack(r.route, r.request, r.trial, r.attempt, WireVerdict::REFUSED,
          "the store refused the report: " + written.error().message);
    }
  }

  ordered_json result_json(const TrialId& trial, Attempt attempts, const SubmittedTrial& submitted,
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

  void on_fetch(const std::string& route, Envelope::Reader envelope) {
    auto fetch = envelope.getFetchBlob();
    auto digest = wire::digest_of(fetch.getDigest());
    if (!digest) {
      return reply_error(route, envelope.getRequestId(), WireCode::MALFORMED, "not a digest");
    }
    auto snapshot = store_.snapshot();
    auto blob = snapshot.blob(*digest);
    if (!blob) {
      return reply_error(route, envelope.getRequestId(), WireCode::NOT_FOUND,
                         "no blob " + digest->str() + " in the coordinator's store");
    }
    const std::uint64_t offset = std::min<std::uint64_t>(fetch.getOffset(), blob->size());
    const std::uint64_t length = std::min<std::uint64_t>(
        {fetch.getLength(), schema::wire::K_MAX_CHUNK_BYTES, blob->size() - offset});
    capnp::MallocMessageBuilder message;
    auto chunk = wire::start(message, envelope.getRequestId()).initBlobChunk();
    wire::set_digest(chunk.initDigest(), *digest);
    chunk.setTotalSize(blob->size());
    chunk.setOffset(offset);
    metrics_.blob_bytes(BlobDirection::served, length);
    chunk.setBytes(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(blob->data()) + offset, length));
    reply(route, wire::encode(message));
  }

  // ---- clients

  void on_find_missing(const std::string& route, Envelope::Reader envelope) {
    std::vector<Digest> wanted;
    for (auto d : envelope.getFindMissing().getDigests()) {
      if (auto digest = wire::digest_of(d)) wanted.push_back(*digest);
    }
    auto missing = store_.snapshot().missing_blobs(wanted);
    capnp::MallocMessageBuilder message;
    auto list = wire::start(message, envelope.getRequestId())
                    .initMissing()
                    .initDigests(static_cast<unsigned>(missing.size()));
    for (unsigned i = 0; i < missing.size(); ++i) wire::set_digest(list[i], missing[i]);
    reply(route, wire::encode(message));
  }

  void on_put_blob(const std::string& route, Envelope::Reader envelope, Instant now) {
    auto chunk = envelope.getPutBlob();
    auto digest = wire::digest_of(chunk.getDigest());
    const std::uint64_t request = envelope.getRequestId();
    if (!digest) return reply_error(route, request, WireCode::MALFORMED, "not a digest");
    auto bytes = chunk.getBytes();
    // A client is its key, with keys: a client opening many connections
    // still has one share of the spool.
    const std::string client = client_ ? "key " + client_->key : "connection " + route;
    auto added = uploads_.add(client, *digest, chunk.getTotalSize(), chunk.getOffset(),
                              std::as_bytes(std::span(bytes.begin(), bytes.size())), now);
    if (!added) {
      using Refusal = UploadSpool::Refusal;
      const Refusal why = added.error().why;
      const WireCode code = why == Refusal::too_large      ? WireCode::TOO_LARGE
                            : why == Refusal::out_of_order ? WireCode::OUT_OF_ORDER
                            : why == Refusal::bad_hash     ? WireCode::REFUSED
                                                           : WireCode::BUSY;
      return reply_error(route, request, code, added.error().message);
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

  void on_submit(const std::string& route, Envelope::Reader envelope, Instant now) {
    auto job = envelope.getSubmitJob();
    const std::uint64_t request = envelope.getRequestId();
    JobSubmission submission;
    submission.priority = job.getPriority();
    submission.name = wire::text(job.getName());
    // The name is shown to every client and on the status page.
    if (auto bad = named_text_problem("the job's name", submission.name, kMaxJobNameBytes)) {
      return reply_error(route, request, WireCode::REFUSED,
                         *bad + "; name the job with plain text");
    }
    char id[32];
    if (const std::string token = wire::text(job.getToken()); !token.empty()) {
      // The client named the submission: sent again (its answer was lost),
      // it is answered with the job it made, which is not made twice.
      const bool hex = token.size() == 16 && std::all_of(token.begin(), token.end(), [](char c) {
                         return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                       });
      if (!hex) {
        return reply_error(route, request, WireCode::MALFORMED,
                           "a submission token is 16 lowercase hex digits");
      }
      std::snprintf(id, sizeof id, "job_%s", token.c_str());
      if (auto existing = scheduler_.job_status(JobId(id))) {
        // Sent again: in parts, any part of a job already made is answered
        // as its last was.
        const bool same_size = job.getParts() > 1 || existing->trials == job.getSpecs().size();
        if (!same_size || existing->name != submission.name) {
          return reply_error(route, request, WireCode::REFUSED,
                             std::string("token ") + token + " already names job " + id + " (\"" +
                                 existing->name + "\", " + std::to_string(existing->trials) +
                                 " trials); a new submission needs a new token");
        }
        capnp::MallocMessageBuilder message;
        auto accepted = wire::start(message, request).initJobAccepted();
        accepted.setJob(id);
        accepted.setTotal(existing->trials);
        return reply(route, wire::encode(message));
      }
    } else if (job.getParts() > 1) {
      return reply_error(route, request, WireCode::MALFORMED,
                         "a submission in parts needs a token to name it");
    } else {
      std::snprintf(id, sizeof id, "job_%016llx",
                    static_cast<unsigned long long>(world_.random64()));
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
          return reply_error(route, request, WireCode::OUT_OF_ORDER,
                             "part " + std::to_string(part) + " of job " + id +
                                 " came before its part 0 (or after the job was dropped, idle "
                                 "for 60 s): send the job again from part 0");
        }
        if (pending_jobs_.size() >= kMaxPendingJobs) {
          return reply_error(route, request, WireCode::BUSY,
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
                                            now})
                    .first;
      }
      pending = &found->second;
      if (pending->parts != parts || pending->name != submission.name ||
          pending->owner != (client_ ? client_->key : "") || part >= parts) {
        return reply_error(route, request, WireCode::REFUSED,
                           "part " + std::to_string(part) + " of " + std::to_string(parts) +
                               " does not belong to job " + id + ", which is being submitted in " +
                               std::to_string(pending->parts) + " parts under another name or key");
      }
      if (part < pending->next) return reply_ok(route, request);  // sent again
      if (part > pending->next) {
        return reply_error(route, request, WireCode::OUT_OF_ORDER,
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
      return reply_error(route, request, WireCode::REFUSED,
                         "the coordinator's queue is full: it holds " + std::to_string(queued) +
                             " queued trials, and " + std::to_string(job.getSpecs().size()) +
                             " more would pass its limit of " + std::to_string(config_.max_queued) +
                             " (--max-queued); submit again when some have run, or in smaller "
                             "jobs");
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
    std::map<std::pair<std::string, std::string>, std::expected<Digest, std::string>> segments;
    std::map<std::pair<Digest, Digest>, std::optional<std::string>> checked_bundles;
    std::vector<TrialInput> inputs;
    auto snapshot = store_.snapshot();
    std::size_t index = held;
    for (auto text : job.getSpecs()) {
      const std::size_t trial = index++;
      auto submitted = read_payload(wire::text(text), specs_);
      if (!submitted) {
        problem(trial, submitted.error());
        continue;
      }
      TrialInput input;
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
        if (auto bad =
                bundle_problem(snapshot, *archive, *pack->expected_bundle_hash, checked_bundles)) {
          problem(trial, *bad);
        }
        input.bundles.push_back(*archive);
      }
      const auto key = std::make_pair(spec.parent_run_id.str(), spec.at_event.str());
      auto segment = segments.find(key);
      if (segment == segments.end())
        segment = segments.emplace(key, segment_of(snapshot, spec)).first;
      if (!segment->second) {
        problem(trial, segment->second.error());
        continue;
      }
      input.segment = *segment->second;
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
      return reply_error(route, request, WireCode::REFUSED, message);
    }
    if (pending != nullptr) {
      pending->inputs.insert(pending->inputs.end(), std::make_move_iterator(inputs.begin()),
                             std::make_move_iterator(inputs.end()));
      if (++pending->next < pending->parts) return reply_ok(route, request);
      inputs = std::move(pending->inputs);
      pending_jobs_.erase(id);
    }
    const std::size_t total = inputs.size();
    submission.trials = std::move(inputs);
    submission.owner = client_ ? client_->key : "";
    auto records = scheduler_.submit(std::move(submission), now);
    if (!records) return reply_error(route, request, WireCode::REFUSED, records.error().message);
    for (const auto& record : *records) {
      if (const auto* submitted = std::get_if<JobSubmitted>(&record)) note_job(*submitted);
    }
    keep(std::move(*records));
    turn_durable_ = true;
    trim_ = true;
    log_(LogLevel::info,
         std::string("job ") + id + " submitted with " + std::to_string(total) + " trials");
    capnp::MallocMessageBuilder message;
    auto accepted = wire::start(message, request).initJobAccepted();
    accepted.setJob(id);
    accepted.setTotal(total);
    reply(route, wire::encode(message));
  }

  // Why the archive blob `archive` cannot stand for a pack pinned to `pin`:
  // not uploaded, not an archive, or holding a tree of another bundle hash.
  // Each (archive, pin) is read once per submission.
  static std::optional<std::string> bundle_problem(
      const store::Snapshot& snapshot, const Digest& archive, const Digest& pin,
      std::map<std::pair<Digest, Digest>, std::optional<std::string>>& checked) {
    const auto key = std::make_pair(archive, pin);
    if (auto done = checked.find(key); done != checked.end()) return done->second;
    std::optional<std::string> problem;
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
      }
    }
    checked.emplace(key, problem);
    return problem;
  }

  // The blob of the parent's history up to the fork point, stored once.
  std::expected<Digest, std::string> segment_of(const store::Snapshot& snapshot,
                                                const sandbox::TrialSpecification& spec) {
    auto parent = snapshot.run(spec.parent_run_id);
    if (!parent) {
      return std::unexpected("no run " + spec.parent_run_id.str() + " in the coordinator's store " +
                             config_.store.string() + "; import it there first (forktrial run " +
                             "import FILE --store " + config_.store.string() + " --id " +
                             spec.parent_run_id.str() + ")");
    }
    auto point = snapshot.find_event(*parent, spec.at_event);
    if (!point) {
      return std::unexpected("no event " + spec.at_event.str() + " in the history of run " +
                             spec.parent_run_id.str());
    }
    auto stored = store_.write([&](store::Writer& writer) {
      return writer.store_segment(spec.parent_run_id, point->seq);
    });
    if (!stored) return std::unexpected(stored.error().message);
    return *stored;
  }

  ordered_json status_json(const JobStatus& job, Instant now) const {
    ordered_json counts = ordered_json::object();
    for (std::size_t s = 0; s < kTrialStatusCount; ++s) {
      counts[std::string(trial_status_name(static_cast<TrialStatus>(s)))] = job.counts[s];
    }
    ordered_json outcomes = ordered_json::object();
    for (std::size_t o = 0; o < kOutcomes.size(); ++o) {
      outcomes[std::string(outcome_name(kOutcomes[o]))] = job.outcomes[o];
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
        {"submitted_at", timestamp_json(job.submitted_at)},
        {"finished_at", job.finished_at ? timestamp_json(*job.finished_at) : ordered_json(nullptr)},
        {"throughput", activity_.throughput(job, now)},
        {"owner", job.owner}};
  }

  static ordered_json timestamp_json(Instant at) {
    return format_timestamp(at.time_since_epoch().count());
  }

  // What `status` answers: every job, or with `mine` those the client of the
  // message being handled may read.
  ordered_json jobs_doc(Instant now, bool mine = false) const {
    ordered_json all = ordered_json::array();
    for (const auto& status : scheduler_.jobs()) {
      if (!mine || may_act_on(status)) all.push_back(status_json(status, now));
    }
    ordered_json doc{{"jobs", all}};
    if (store_full_) doc["store_full"] = *store_full_;
    return doc;
  }
  ordered_json job_doc(const JobStatus& status, Instant now) const {
    ordered_json doc = status_json(status, now);
    if (store_full_) doc["store_full"] = *store_full_;
    return doc;
  }

  void reply_json(const std::string& route, std::uint64_t request, const ordered_json& doc,
                  bool workers) {
    capnp::MallocMessageBuilder message;
    auto envelope = wire::start(message, request);
    if (workers) {
      envelope.initWorkers().setText(doc.dump());
    } else {
      envelope.initJobStatus().setText(doc.dump());
    }
    reply(route, wire::encode(message));
  }

  // Whether the client of the message being handled may act on `job`: its
  // owner, an administrator, or anyone when the coordinator has no keys.
  bool may_act_on(const JobStatus& job) const {
    if (!zap_) return true;
    return client_ && (client_->admin || client_->key == job.owner);
  }

  // The refusal of a client acting on a job it may not: said the same for a
  // job of another owner and for none, so a key learns nothing of others'.
  void refuse_not_theirs(const std::string& route, std::uint64_t request, const std::string& job,
                         std::string_view what) {
    reply_error(route, request, WireCode::NOT_FOUND,
                "no job " + job +
                    " of this client's key: only the key that submitted a job, "
                    "or an administrator's (the coordinator's --admin-clients), may " +
                    std::string(what) + " it");
  }

  void on_status(const std::string& route, Envelope::Reader envelope) {
    const std::string job = wire::text(envelope.getStatusRequest().getJob());
    if (job.empty())
      return reply_json(route, envelope.getRequestId(), jobs_doc(clock_now(), true), false);
    auto status = scheduler_.job_status(JobId(job));
    if (status && !may_act_on(*status)) {
      return refuse_not_theirs(route, envelope.getRequestId(), job, "read");
    }
    if (!status) {
      return reply_error(route, envelope.getRequestId(), WireCode::NOT_FOUND, "no job " + job);
    }
    reply_json(route, envelope.getRequestId(), job_doc(*status, clock_now()), false);
  }

  void on_cancel(const std::string& route, Envelope::Reader envelope, Instant now) {
    const JobId job(wire::text(envelope.getCancelJob().getJob()));
    if (auto status = scheduler_.job_status(job); status && !may_act_on(*status)) {
      log_(LogLevel::warn, "refused to cancel job " + job.str() +
                               " for a client key that "
                               "neither submitted it nor is an administrator's");
      return refuse_not_theirs(route, envelope.getRequestId(), job.str(), "cancel");
    }
    auto cancelled = scheduler_.cancel(job, now);
    if (!cancelled) {
      return reply_error(route, envelope.getRequestId(), WireCode::NOT_FOUND,
                         cancelled.error().message);
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
    reply_json(route, envelope.getRequestId(),
               status_json(*scheduler_.job_status(job), clock_now()), false);
  }

  void on_results(const std::string& route, Envelope::Reader envelope) {
    auto query = envelope.getResultsRequest();
    const JobId job(wire::text(query.getJob()));
    auto status = scheduler_.job_status(job);
    if (status && !may_act_on(*status)) {
      return refuse_not_theirs(route, envelope.getRequestId(), job.str(), "read");
    }
    if (!status) {
      return reply_error(route, envelope.getRequestId(), WireCode::NOT_FOUND,
                         "no job " + job.str());
    }
    const auto total = static_cast<std::uint32_t>(status->trials);
    const std::uint32_t from = std::min(query.getAfter(), total);
    const std::uint32_t limit = std::clamp<std::uint32_t>(query.getLimit(), 1, 2000);
    const std::uint32_t to = std::min<std::uint64_t>(total, std::uint64_t{from} + limit);
    capnp::MallocMessageBuilder message;
    auto results = wire::start(message, envelope.getRequestId()).initResults();
    auto lines = results.initLines(to - from);
    for (std::uint32_t i = from; i < to; ++i) lines.set(i - from, result_line(TrialId{job, i}));
    results.setNext(to);
    results.setTotal(total);
    reply(route, wire::encode(message));
  }

  // The trial's line of `results`: its result once reconciled; before, what
  // is known (its status, and the reasons of its failed attempts).
  std::string result_line(const TrialId& trial) {
    if (auto stored = stored_result(trial)) return std::move(*stored);
    auto state = scheduler_.trial_state(trial);
    auto submitted = read_payload(*scheduler_.payload(trial), specs_);
    ordered_json line =
        result_json(trial, state->attempt, *submitted, {}, state->worker.value_or(WorkerId("")));
    line["status"] = std::string(trial_status_name(state->status));
    line["outcome"] = nullptr;
    line["exit_code"] = nullptr;
    line["detail"] = "";
    for (const auto& reason : state->reasons) {
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

  void on_workers(const std::string& route, std::uint64_t request) {
    reply_json(route, request, workers_doc(), true);
  }

  // What `workers` answers.
  ordered_json workers_doc() const {
    ordered_json list = ordered_json::array();
    for (const auto& w : scheduler_.workers()) {
      list.push_back({{"worker", w.id.str()},
                      {"alive", w.alive},
                      {"slots", w.slots},
                      {"prefetch", w.prefetch},
                      {"running", w.running},
                      {"last_seen", format_timestamp(w.last_seen.time_since_epoch().count())},
                      {"cached_digests", w.cached_digests}});
      // What its hello said of its host, when this process heard it.
      if (auto info = worker_info_.find(w.id); info != worker_info_.end()) {
        list.back()["degraded_nets"] = info->second.warnings;
        list.back()["isolation"] = info->second.isolation;
      }
    }
    ordered_json doc{
        {"workers", list}, {"errors_answered", errors_}, {"replies_undelivered", undelivered_}};
    if (store_full_) doc["store_full"] = *store_full_;
    return doc;
  }

  // ---- the status API (coordinator/status_page.h), on this thread

  transport::HttpResponse answer_api(const transport::HttpRequest& request) {
    const Instant now = clock_now();
    if (request.path == "/api/jobs") return status_json_response(200, jobs_doc(now));
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

  // The candidates of the job ranked as `results --by candidate` ranks them,
  // the first kRankedShown.
  ordered_json candidates_doc(const JobStatus& job) const {
    constexpr std::size_t kRankedShown = 1000;
    CandidateTally tally;
    scheduler_.visit_trials(job.id, [&](const TrialSummary& trial) {
      tally.add(payload_candidate(trial.payload),
                trial.outcome ? outcome_name(*trial.outcome) : trial_status_name(trial.status));
    });
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

  // The trials that ended without completing, newest first (of `job` only,
  // when given): each its line of `results`, with when it ended.
  ordered_json failures_doc(const std::optional<std::string>& job) {
    ordered_json list = ordered_json::array();
    for (const Activity::Failure& failure : activity_.failures()) {
      if (job && failure.trial.job.str() != *job) continue;
      ordered_json line = ordered_json::parse(result_line(failure.trial), nullptr, false);
      if (line.is_discarded()) continue;
      line["ended_at"] = timestamp_json(failure.at);
      list.push_back(std::move(line));
    }
    return ordered_json{{"failures", list}, {"kept", Activity::kFailuresKept}};
  }

  const ServerConfig& config_;
  World& world_;  // every clock, random number and free-space reading
  const sandbox::Cancellation& stop_;
  const Log& log_;
  store::EventStore store_;
  UploadSpool uploads_;  // blobs clients are uploading, spilled to disk
  Scheduler scheduler_;
  zmq::context_t context_;
  std::optional<zmq::socket_t> socket_;       // none for a CoordinatorCore
  std::optional<transport::ZapHandler> zap_;  // with CURVE
  // A worker's offer of slots that found no work, waiting for some.
  struct Parked {
    WorkerId worker;
    std::uint32_t free = 0;
    std::uint64_t request = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::string, Parked> parked_;     // by routing id
  Records pending_;                          // applied, not yet in the store
  std::vector<Reconciliation> reconciling_;  // reports accepted this turn, not yet in the store
  SpecCache specs_;
  std::map<TrialId, SubmittedTrial> submitted_;              // parsed, of trials leased
  std::vector<std::pair<std::string, std::string>> outbox_;  // (route, frame), after the commit
  std::map<std::string, Peer> peers_;                        // by routing id
  std::map<WorkerId, std::string> worker_routes_;
  std::map<WorkerId, WorkerInfo> worker_info_;

  // Each trial's trial.result event in the log (its seq; 0: none yet), by
  // job, in trial order.
  std::unordered_map<std::string, std::vector<std::uint64_t>> result_seqs_;
  std::uint64_t errors_ = 0;
  std::uint64_t undelivered_ = 0;          // replies ZeroMQ would not take
  bool trim_ = false;                      // a submission was handled this turn
  std::optional<std::string> store_full_;  // why, while the store takes no writes
  CoordinatorMetrics metrics_;
  bool gauges_stale_ = true;  // the scheduler changed since metrics_ last observed it
  Activity activity_;         // recent failures and pace, for the status API
  transport::Probes probes_;
  transport::LoopHandoff api_;                       // the status API's requests, for this thread
  std::optional<transport::HttpServer> http_;        // last: it stops before what it reads
  std::set<std::string> bound_ids_;                  // worker ids the allow list binds to a key
  std::optional<std::string> bound_id_;              // that of the message being handled
  std::optional<transport::ClientIdentity> client_;  // that of the message being handled
  // Jobs being submitted in parts, by id: what their parts so far held.
  struct PendingJob {
    std::string name;
    int priority = 0;
    std::uint32_t parts = 0;
    std::string owner;
    std::uint32_t next = 0;  // the part expected next
    std::vector<TrialInput> inputs;
    Instant last;
  };
  std::map<std::string, PendingJob> pending_jobs_;

  static constexpr std::size_t kMaxPendingJobs = 16;
  static constexpr Duration kPendingJobIdle{60'000};

  std::size_t pending_trials() const {
    std::size_t trials = 0;
    for (const auto& [id, job] : pending_jobs_) trials += job.inputs.size();
    return trials;
  }

  // The turn accepted a submission or a cancel: its commit is flushed whole,
  // meta page included, before anything is answered.
  bool turn_durable_ = false;
  // The requests of this turn whose answers depend on its commit: (route, id).
  std::set<std::pair<std::string, std::uint64_t>> turn_writes_;
  std::chrono::steady_clock::time_point next_probe_;
  std::chrono::steady_clock::time_point last_full_log_;
  std::chrono::seconds probe_wait_{1};
};

}  // namespace

int run_coordinator(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log) {
  Server server(config, stop, log);
  return server.run();
}

struct CoordinatorCore::Impl {
  Impl(const ServerConfig& given, const Log& log, std::uint64_t seed, Instant start)
      : world(seed, std::chrono::system_clock::time_point{start.time_since_epoch()}),
        config(with_world(given, world)),
        server(config, stop, log, false) {}
  static ServerConfig with_world(ServerConfig config, World& world) {
    config.world = &world;
    return config;
  }
  VirtualWorld world;
  const ServerConfig config;   // the caller's, with `world`
  sandbox::Cancellation stop;  // never cancelled: the caller stops by destroying
  Server server;
};

CoordinatorCore::CoordinatorCore(const ServerConfig& config, const Log& log, std::uint64_t seed,
                                 Instant start)
    : impl_(std::make_unique<Impl>(config, log, seed, start)) {}
CoordinatorCore::~CoordinatorCore() = default;

std::vector<std::pair<std::string, std::string>> CoordinatorCore::turn(const std::string& route,
                                                                       std::string_view frame,
                                                                       Instant now) {
  const Frame one{route, std::string(frame)};
  return turn(std::span(&one, 1), now);
}

std::vector<std::pair<std::string, std::string>> CoordinatorCore::turn(
    std::span<const Frame> frames, Instant now) {
  const auto wall = impl_->world.wall_now();
  if (now > wall) impl_->world.advance(now - wall);
  return impl_->server.turn(frames);
}

const Scheduler& CoordinatorCore::scheduler() const {
  return impl_->server.scheduler();
}

VirtualWorld& CoordinatorCore::world() {
  return impl_->world;
}

}  // namespace forktrial::coordinator
