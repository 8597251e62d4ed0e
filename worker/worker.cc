#include "worker/worker.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <zmq.hpp>

#include "base/unique_fd.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "transport/metrics_endpoint.h"
#include "transport/socket_monitor.h"
#include "worker/blob_assembly.h"
#include "worker/blob_cache.h"
#include "worker/metrics.h"
#include "worker/session.h"

namespace forktrial::worker {
namespace {

using Clock = std::chrono::steady_clock;
using schema::wire::Envelope;

struct BundleRef {
  Digest pin;
  Digest archive;
};

// One assignment, from its arrival to its report's acknowledgement.
struct Trial {
  AttemptKey key;
  std::string spec;
  std::string fork_run_id;
  sandbox::ParentRunContext parent;  // an activegraph trial's
  Digest segment;
  std::vector<BundleRef> bundles;
  std::vector<BlobCache::Pin> pins;  // what it needs stays in the cache
  std::shared_ptr<sandbox::Cancellation> cancel = std::make_shared<sandbox::Cancellation>();
  std::uint64_t arrival = 0;  // assignments are started in the order they came
  bool started = false;
};

// A blob being fetched, chunk by chunk.
struct Fetch {
  std::optional<BlobAssembly> assembly;
  bool in_flight = false;
  std::uint64_t request = 0;                   // of the chunk asked for last
  std::chrono::steady_clock::time_point sent;  // when it was asked for
};

// What a slot hands back: the frame to send (a report or a failure).
struct Finished {
  AttemptKey key;
  std::string frame;
  Clock::duration took{};            // in its slot; zero when it never ran
  std::optional<Outcome> outcome{};  // the report's; none for a failure or a stop
};

static_assert(static_cast<int>(schema::Net::WRITE_BUDGET) == static_cast<int>(Net::write_budget),
              "the wire's nets are schema/outcome.h's, in its order");

std::string report_frame(const AttemptKey& key, const sandbox::ExecutedTrial& executed,
                         sandbox::Isolation isolation, std::chrono::milliseconds duration) {
  wire::MessageBuilder message;
  auto report = wire::start(message, 0).initReport();
  set_ref(report.initTrial(), key);
  report.setIsolation(isolation == sandbox::Isolation::strict
                          ? schema::wire::IsolationLevel::STRICT
                          : schema::wire::IsolationLevel::STANDARD);
  const auto& verdict = executed.verdict;
  report.setOutcome(static_cast<schema::TrialOutcome>(std::to_underlying(verdict.outcome)));
  report.setDetail(verdict.detail);
  auto warnings = report.initWarnings(static_cast<unsigned>(verdict.warnings.size()));
  for (unsigned i = 0; i < verdict.warnings.size(); ++i) warnings.set(i, verdict.warnings[i]);
  report.setExitCode(verdict.exit_code);
  report.setStoppedByNet(verdict.stopped_by_net);
  report.setWallClockKilled(verdict.wall_clock_killed);
  report.setHasClaim(verdict.claimed_events.has_value() && verdict.claimed_failures.has_value());
  report.setClaimedEvents(verdict.claimed_events.value_or(0));
  report.setClaimedFailures(verdict.claimed_failures.value_or(0));
  report.setForkSeq(executed.fork_seq);
  report.setDurationMillis(static_cast<std::uint64_t>(duration.count()));
  report.setNet(static_cast<schema::Net>(std::to_underlying(verdict.net)));
  auto executor = report.initExecutor();
  executor.setName(executed.executor);
  executor.setVersion(executed.executor_version);
  auto events = report.initEvents(static_cast<unsigned>(executed.events.size()));
  for (unsigned i = 0; i < executed.events.size(); ++i) {
    const auto& e = executed.events[i];
    auto out = events[i];
    out.setId(e.id.str());
    out.setType(e.type);
    out.setPayload(e.payload);
    out.setTimestamp(e.timestamp);
    if (e.actor) out.getActor().setActorName(*e.actor);
    if (e.frame_id) out.getFrame().setFrameId(*e.frame_id);
    if (e.caused_by) out.getCause().setCausedBy(e.caused_by->str());
  }
  return wire::encode(message);
}

class Worker {
 public:
  Worker(const WorkerConfig& config, const sandbox::Cancellation& stop, const Log& log)
      : config_(config),
        world_(config.world != nullptr ? *config.world : real_world()),
        stop_(stop),
        log_(log),
        cache_(config.cache_dir / "blobs",
               BlobCacheOptions{.byte_cap = config.cache_bytes,
                                .on_eviction = [this](const Digest& d) { evicted(d); }}),
        socket_(context_, zmq::socket_type::dealer),
        // A trial mostly waits on its child: every slot gets a thread of its
        // own, whatever the number of cores, and none is kept for this one.
        parallelism_(tbb::global_control::max_allowed_parallelism,
                     std::max<std::size_t>(config.slots + 1,
                                           tbb::global_control::active_value(
                                               tbb::global_control::max_allowed_parallelism))),
        arena_(static_cast<int>(config.slots), 0) {
    // A fresh routing id per incarnation, so a restarted worker is never
    // mistaken for the connection it replaces.
    socket_.set(zmq::sockopt::routing_id, config.worker_id + "/" + std::to_string(::getpid()) +
                                              "/" + std::to_string(world_.random64() >> 32));
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, static_cast<int>(config.send_queue));
    // Reconnects start at 10 ms (ZeroMQ's default is 100 ms), so a worker
    // started beside its coordinator, or one that restarted, joins at once,
    // and back off to a second while the coordinator is down.
    socket_.set(zmq::sockopt::reconnect_ivl, 10);
    socket_.set(zmq::sockopt::reconnect_ivl_max, 1000);
    if (config.keys) {
      transport::make_curve_client(socket_, *config.keys);
      // A key the coordinator does not list is refused at every handshake,
      // which ZeroMQ retries without a word but to its monitor.
      monitor_ = transport::monitor_socket(context_, socket_, "inproc://forktrial-worker-monitor",
                                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    }
    socket_.connect(config.coordinator);
    // Trials' scratch stores live in the cache directory, which this worker
    // holds alone (the cache's lock): what a killed worker left there is
    // stale and goes now, while the cache itself survives the restart.
    child_ = config.child;
    if (child_.scratch_parent.empty()) {
      child_.scratch_parent = config.cache_dir / "scratch";
      std::filesystem::remove_all(child_.scratch_parent);
      std::filesystem::create_directories(child_.scratch_parent);
    }
    // A slot's next trial reuses a scratch directory an earlier one gave
    // back, reset, rather than making its own (sandbox/scratch.h).
    scratch_pool_.emplace(child_.scratch_parent);
    child_.scratch_pool = &*scratch_pool_;
    forget_stale_packs();
    if (config.http) {
      auto routes = probes_.routes();
      routes.push_back(transport::metrics_route(metrics_.registry()));
      http_.emplace(*config.http, std::move(routes), log);
      log_(LogLevel::info, "worker serving HTTP on http://" + http_->address().str() + "/");
    }
  }

  SessionConfig session_config() {
    SessionConfig session;
    session.worker_id = config_.worker_id;
    session.slots = config_.slots;
    session.prefetch = config_.prefetch;
    session.heartbeat = config_.heartbeat;
    session.coordinator_timeout = config_.coordinator_timeout;
    session.warnings = config_.preflight_warnings;
    session.isolation = config_.isolation;
    session.executors = config_.executors;
    session.cached = [this] { return cache_.summary(); };
    // A hello starts over: the chunks asked of the coordinator before it
    // are asked again.
    session.said_hello = [this] {
      for (auto& [digest, fetch] : fetches_) fetch.in_flight = false;
    };
    return session;
  }

  int run() {
    session_.start(world_.monotonic_now());
    while (!stop_.cancelled() && exit_code_ < 0) {
      wait_for_input(std::chrono::milliseconds(20));
      watch_handshakes();
      while (receive_one()) {
      }
      probes_.turned();
      observe();
      probes_.set_ready(session_.welcomed(),
                        session_.welcomed()
                            ? std::string()
                            : "the coordinator at " + config_.coordinator +
                                  " has not welcomed this worker (unreachable, or it refused it: "
                                  "see the log)");
      send_finished();
      request_fetches();
      start_ready_trials();
      // Heartbeats, a hello after silence, what `busy` refused, the offer.
      session_.step(world_.monotonic_now());
    }
    for (auto& [key, trial] : trials_) trial.cancel->cancel();
    {
      std::unique_lock lock(finished_mutex_);
      idle_.wait(lock, [&] { return in_slots_ == 0; });
    }
    // After the kills: once told, the coordinator leases the trials to
    // others, and none of them may still run here.
    if (stop_.cancelled()) say_goodbye();
    return exit_code_ < 0 ? 0 : exit_code_;
  }

 private:
  // Never blocks. A message ZeroMQ will not queue (the coordinator has not
  // taken --send-queue of them) is not lost unseen: every kind is sent again
  // (a report after the next hello, an offer, a fetch or a heartbeat at its
  // next turn), and the streak is logged when it starts and when it ends.
  bool send(const std::string& frame) {
    if (socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait)) {
      if (unsent_ > 0) {
        log_(LogLevel::info, "the coordinator takes messages again; " + std::to_string(unsent_) +
                                 " were not sent meanwhile and are sent again");
        unsent_ = 0;
      }
      return true;
    }
    metrics_.unsent();
    if (unsent_++ == 0) {
      log_(LogLevel::warn,
           "a message to the coordinator was not sent: ZeroMQ holds " +
               std::to_string(config_.send_queue) +
               " it has not taken (--send-queue); it and what follows are sent again");
    }
    return false;
  }

  // Best-effort and bounded: the answer is awaited at most goodbye_wait, and
  // whatever else the coordinator sends meanwhile is dropped (the trials
  // are gone). Unanswered, the worker is found lost when its leases lapse.
  void say_goodbye() {
    const std::string reason = config_.stop_reason ? config_.stop_reason() : "stopped";
    const auto request = session_.goodbye(reason);
    if (!request) return;
    const auto deadline = world_.monotonic_now() + config_.goodbye_wait;
    for (auto now = world_.monotonic_now(); now < deadline; now = world_.monotonic_now()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;  // another signal: the deadline still holds
      }
      zmq::message_t frame;
      while (socket_.recv(frame, zmq::recv_flags::dontwait)) {
        auto decoded = wire::decode(frame.to_string_view());
        if (!decoded || decoded->envelope().getRequestId() != *request) continue;
        const auto envelope = decoded->envelope();
        if (envelope.isError()) {
          log_(LogLevel::warn, "the coordinator did not take this worker's goodbye (" +
                                   wire::status_of(envelope.getError()).message +
                                   "); it finds the worker lost when its leases lapse");
        } else {
          log_(LogLevel::info, "said goodbye to the coordinator (" + reason +
                                   "): what this worker held goes to other workers now");
        }
        return;
      }
    }
    log_(LogLevel::warn, "the coordinator did not answer this worker's goodbye within " +
                             std::to_string(config_.goodbye_wait.count()) +
                             " ms; it finds the worker lost when its leases lapse");
  }

  // A handshake the coordinator's ZAP handler refused ends the worker,
  // saying why: every later one would be refused too.
  void watch_handshakes() {
    while (monitor_ && exit_code_ < 0) {
      const auto event = transport::next_event(*monitor_);
      if (!event) return;
      if (event->event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) continue;
      log_(LogLevel::error,
           "the coordinator at " + config_.coordinator + " refused this worker's key (ZAP status " +
               std::to_string(event->value) +
               "): its public key is not in the coordinator's --allow-workers (the coordinator's "
               "log names the key it refused); add it there and restart the coordinator, or give "
               "--key the keypair of a listed worker");
      exit_code_ = 1;
    }
  }

  void wait_for_input(std::chrono::milliseconds timeout) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, stop_.fd(), ZMQ_POLLIN, 0},
                               {nullptr, wake_.get(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 3, timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal: the loop looks at `stop`
    }
    std::uint64_t count = 0;
    while (::read(wake_.get(), &count, sizeof count) == sizeof count) {
    }
  }

  // A slot finished a trial: the loop reports it and asks for more at once.
  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto written = ::write(wake_.get(), &one, sizeof one);
  }

  bool receive_one() {
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait)) return false;
    auto decoded = wire::decode(frame.to_string_view());
    if (!decoded) {
      metrics_.unreadable();
      log_(LogLevel::warn,
           "the coordinator sent a message this worker cannot read: " + decoded.error().message);
      return true;
    }
    try {
      handle(decoded->envelope());
    } catch (const kj::Exception& e) {
      metrics_.unreadable();
      log_(LogLevel::warn, std::string("a message from the coordinator is malformed: ") +
                               e.getDescription().cStr());
    }
    return true;
  }

  // The session takes the frame first (worker/session.h); what is left
  // here is the trials' and the cache's.
  void handle(Envelope::Reader envelope) {
    if (envelope.isError()) metrics_.rejected(wire::status_of(envelope.getError()).code);
    const bool was_welcomed = session_.welcomed();
    switch (session_.receive(envelope, world_.monotonic_now())) {
      case Received::done:
        if (!was_welcomed && session_.welcomed()) {
          log_(LogLevel::info, "joined the coordinator at " + config_.coordinator);
        }
        return;
      case Received::assignments:
        for (auto assignment : envelope.getAssignments().getAssignments()) accept(assignment);
        return;
      case Received::blob_chunk:
        on_chunk(envelope.getBlobChunk());
        return;
      case Received::stop:
        for (auto ref : envelope.getStopTrials().getTrials()) {
          auto it = trials_.find(attempt_key(ref));
          if (it == trials_.end() || it->second.cancel->cancelled()) continue;
          log_(LogLevel::info, "stopping trial " + it->first.str() + " as the coordinator asked");
          it->second.cancel->cancel();
          if (!it->second.started) {
            metrics_.trial_stopped();  // a started one counts when its slot hands it back
            session_.release(it->first);
            trials_.erase(it);
          }
        }
        return;
      case Received::refused:
        log_(LogLevel::error, "the coordinator refused this worker: " + *session_.refusal());
        exit_code_ = 1;
        return;
      case Received::error: {
        const std::string message =
            wire::prose(envelope.getError().getMessage(), wire::kMaxErrorMessageBytes);
        for (auto& [digest, fetch] : fetches_) {
          if (fetch.in_flight && fetch.request == envelope.getRequestId()) {
            const Digest failed = digest;
            fail_fetch(failed, message);
            return;
          }
        }
        log_(LogLevel::warn, "the coordinator answered with an error: " + message);
        return;
      }
      case Received::unknown:
        log_(LogLevel::warn, "the coordinator sent a message not meant for a worker");
        return;
    }
  }

  void accept(schema::wire::Assignment::Reader assignment) {
    Trial trial;
    trial.key = attempt_key(assignment.getTrial());
    // An attempt this worker already holds (an assignment sent again) is
    // not started twice; a slot may be reading the one held.
    if (trials_.contains(trial.key)) return;
    trial.arrival = ++arrivals_;
    trial.spec = wire::text(assignment.getSpec());
    trial.fork_run_id = wire::text(assignment.getForkRunId());
    if (assignment.hasParentRun()) {
      const auto parent = assignment.getParentRun();
      if (parent.getGoal().isGoalText()) {
        trial.parent.goal = wire::text(parent.getGoal().getGoalText());
      }
      if (parent.getFrame().isFrameId()) {
        trial.parent.frame_id = wire::text(parent.getFrame().getFrameId());
      }
    }
    auto segment = wire::digest_of(assignment.getSegment());
    if (!segment) {
      finished_frame(trial.key, failure_frame(trial.key, "the assignment names no segment"));
      return;
    }
    trial.segment = *segment;
    std::vector<Digest> needed{trial.segment};
    for (auto bundle : assignment.getBundles()) {
      auto pin = wire::digest_of(bundle.getPin());
      auto archive = wire::digest_of(bundle.getArchive());
      if (!pin || !archive) {
        finished_frame(trial.key, failure_frame(trial.key, "the assignment names a bad bundle"));
        return;
      }
      trial.bundles.push_back({*pin, *archive});
      needed.push_back(*archive);
      pin_of_archive_[*archive] = *pin;
    }
    for (const auto& digest : needed) {
      trial.pins.push_back(cache_.pin(digest));
      const bool held = cache_.contains(digest);
      metrics_.cache_lookup(held);
      if (!held) fetches_.try_emplace(digest);
    }
    session_.hold(trial.key);
    trials_.insert_or_assign(trial.key, std::move(trial));
  }

  void request_fetches() {
    const auto now = world_.monotonic_now();
    for (auto& [digest, fetch] : fetches_) {
      // A chunk not answered in time was lost (or the coordinator
      // restarted): ask again; a late answer still counts.
      if (fetch.in_flight && now - fetch.sent < config_.coordinator_timeout) continue;
      wire::MessageBuilder message;
      const std::uint64_t id = session_.next_request_id();
      auto request = wire::start(message, id).initFetchBlob();
      wire::set_digest(request.initDigest(), digest);
      const std::uint64_t offset = fetch.assembly ? fetch.assembly->received() : 0;
      request.setOffset(offset);
      request.setLength(schema::wire::K_MAX_CHUNK_BYTES);
      send(wire::encode(message));
      fetch.in_flight = true;
      fetch.request = id;
      fetch.sent = now;
    }
  }

  void on_chunk(schema::wire::BlobChunk::Reader chunk) {
    auto digest = wire::digest_of(chunk.getDigest());
    if (!digest) return;
    auto it = fetches_.find(*digest);
    if (it == fetches_.end()) return;
    Fetch& fetch = it->second;
    fetch.in_flight = false;
    auto bytes = chunk.getBytes();
    if (!fetch.assembly) {
      auto started = BlobAssembly::start(*digest, chunk.getTotalSize(), config_.cache_bytes);
      if (!started) return fail_fetch(*digest, started.error().message);
      fetch.assembly.emplace(std::move(*started));
    }
    auto added = fetch.assembly->add(
        chunk.getOffset(),
        std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
    if (!added) return fail_fetch(*digest, added.error().message);
    metrics_.blob_bytes_received(bytes.size());
    if (!fetch.assembly->complete()) return;
    auto whole = std::move(*fetch.assembly).finish();
    fetches_.erase(it);
    if (!whole) return fail_fetch(*digest, whole.error().message);
    if (auto put = cache_.put(*digest, *whole); !put) {
      log_(LogLevel::warn, "cannot keep blob " + digest->str() + ": " + put.error().message +
                               "; the trials that need it fail here and are run elsewhere");
      return fail_fetch(*digest, put.error().message);
    }
    if (auto pin = pin_of_archive_.find(*digest); pin != pin_of_archive_.end()) {
      note_archive(pin->second, *digest);
    }
  }

  std::filesystem::path bundles_dir() const { return config_.cache_dir / "bundles"; }

  // Beside each pack's materialized directory, `<pin hex>.archive` names the
  // archive it comes from, so a later run of the worker knows which packs
  // went with archives the cache no longer holds. Written atomically when
  // the archive enters the cache, on this thread.
  void note_archive(const Digest& pin, const Digest& archive) const {
    std::error_code ec;
    std::filesystem::create_directories(bundles_dir(), ec);
    const auto temp = bundles_dir() / (".tmp-" + pin.hex() + ".archive-note");
    {
      std::ofstream out(temp);
      out << archive.str() << "\n";
      if (!out) return;  // advisory: without it a stale pack is only kept longer
    }
    std::filesystem::rename(temp, bundles_dir() / (pin.hex() + ".archive"), ec);
    if (ec) std::filesystem::remove(temp, ec);
  }

  // At start: the packs whose archives the cache no longer holds (evicted
  // while another run of the worker ran, or lost with the cache) go; the
  // others are remembered, so their eviction removes them.
  void forget_stale_packs() {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(bundles_dir(), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(".tmp-") && name.ends_with(".archive-note")) {
        std::filesystem::remove(entry.path(), ec);  // a note a killed slot did not finish
        continue;
      }
      if (!name.ends_with(".archive") || name.starts_with(".")) continue;
      const auto pin = Digest::parse("sha256:" + name.substr(0, name.size() - 8));
      std::ifstream in(entry.path());
      std::string text;
      std::getline(in, text);
      const auto archive = Digest::parse(text);
      if (pin && archive && cache_.contains(*archive)) {
        pin_of_archive_[*archive] = *pin;
        continue;
      }
      if (pin) {
        if (auto failure = pack::dematerialize(*pin, bundles_dir())) {
          log_(LogLevel::warn,
               "cannot remove the stale materialized pack " + pin->str() + ": " + failure->message);
          continue;
        }
        log_(LogLevel::debug, "removed the materialized pack " + pin->str() +
                                  ", whose archive the cache no longer holds");
      }
      std::filesystem::remove(entry.path(), ec);
    }
  }

  // The cache evicted `digest` to make room (on this thread, in a put): a
  // pack archive's materialized directory goes with it. No trial uses it,
  // since every trial pins its archives.
  void evicted(const Digest& digest) {
    metrics_.cache_evicted();
    log_(LogLevel::debug, "evicted " + digest.str() + " from the cache, the least recently used; " +
                              std::to_string(cache_.bytes_used()) + " of " +
                              std::to_string(cache_.byte_cap()) + " bytes held, " +
                              std::to_string(cache_.pinned_bytes()) + " pinned");
    auto it = pin_of_archive_.find(digest);
    if (it == pin_of_archive_.end()) return;
    if (auto failure = pack::dematerialize(it->second, bundles_dir())) {
      log_(LogLevel::warn,
           "cannot remove the materialized pack " + it->second.str() + ": " + failure->message);
    } else {
      std::error_code ec;
      std::filesystem::remove(bundles_dir() / (it->second.hex() + ".archive"), ec);
      log_(LogLevel::debug, "removed the materialized pack " + it->second.str() +
                                " with its evicted archive " + digest.str());
    }
    pin_of_archive_.erase(it);
  }

  void fail_fetch(const Digest& digest, const std::string& why) {
    fetches_.erase(digest);
    for (auto it = trials_.begin(); it != trials_.end();) {
      Trial& trial = it->second;
      bool needs = trial.segment == digest;
      for (const auto& bundle : trial.bundles) needs = needs || bundle.archive == digest;
      if (!trial.started && needs) {
        finished_frame(trial.key,
                       failure_frame(trial.key, "cannot fetch blob " + digest.str() + ": " + why));
        it = trials_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Ready trials go to free slots, oldest assignment first; the rest wait
  // (prefetched) with their leases renewed by every heartbeat.
  void start_ready_trials() {
    std::vector<Trial*> waiting;
    for (auto& [key, trial] : trials_) {
      if (trial.started || trial.cancel->cancelled()) continue;
      bool is_ready = cache_.contains(trial.segment);
      for (const auto& bundle : trial.bundles) {
        is_ready = is_ready && cache_.contains(bundle.archive);
      }
      if (is_ready) waiting.push_back(&trial);
    }
    std::sort(waiting.begin(), waiting.end(),
              [](const Trial* a, const Trial* b) { return a->arrival < b->arrival; });
    for (Trial* trial : waiting) {
      {
        std::lock_guard lock(finished_mutex_);
        if (in_slots_ >= config_.slots) return;
        ++in_slots_;
      }
      trial->started = true;
      arena_.enqueue([this, trial] { execute(*trial); });
    }
  }

  // On a slot thread: materialize, run, and hand the frame back.
  void execute(const Trial& trial) {
    const auto started = world_.monotonic_now();
    std::string frame;
    std::optional<Outcome> outcome;
    try {
      auto spec = sandbox::parse_trial_specification(trial.spec);
      if (!spec)
        throw std::runtime_error("the assigned specification is invalid: " +
                                 spec.error().list.front());
      std::vector<sandbox::PackSource*> packs{&spec->candidate};
      for (auto& extra : spec->extra_packs) packs.push_back(&extra);
      for (auto* pack : packs) {
        auto archive = wire::archive_of_root(pack->root_dir);
        if (!archive || !pack->expected_bundle_hash) {
          throw std::runtime_error("pack " + pack->root_dir + " is not a pinned bundle");
        }
        auto bytes = cache_.get(*archive);
        if (!bytes)
          throw std::runtime_error("bundle archive " + archive->str() + " left the cache");
        auto dir =
            pack::materialize(*bytes, *pack->expected_bundle_hash, config_.cache_dir / "bundles");
        if (!dir)
          throw std::runtime_error("cannot materialize " + archive->str() + ": " +
                                   dir.error().message);
        pack->root_dir = dir->string();
      }
      auto segment = cache_.get(trial.segment);
      if (!segment) throw std::runtime_error("segment " + trial.segment.str() + " left the cache");
      sandbox::ChildOptions options = child_;
      options.cancellation = trial.cancel.get();
      const auto bytes = std::as_bytes(std::span(segment->data(), segment->size()));
      auto executed = sandbox::execute_trial(bytes, *spec, store::RunId(trial.fork_run_id), options,
                                             trial.parent);
      if (const int signal = stopped_from_outside(executed.verdict)) {
        // Said by the coordinator in its log, with the attempt.
        frame = failure_frame(trial.key, "its child was stopped by SIG" +
                                             std::string(::sigabbrev_np(signal)) +
                                             " from outside the worker, not by the trial");
      } else {
        frame = report_frame(trial.key, executed, options.isolation,
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                 world_.monotonic_now() - started));
        outcome = executed.verdict.outcome;
      }
    } catch (const sandbox::Cancelled&) {
      frame.clear();  // stopped: nothing to say
    } catch (const std::exception& e) {
      frame = failure_frame(trial.key, e.what());
    }
    std::lock_guard lock(finished_mutex_);
    finished_.push_back({trial.key, std::move(frame), world_.monotonic_now() - started, outcome});
    --in_slots_;
    idle_.notify_all();
    wake();
  }

  void finished_frame(const AttemptKey& key, std::string frame) {
    std::lock_guard lock(finished_mutex_);
    finished_.push_back({key, std::move(frame)});
  }

  void send_finished() {
    std::deque<Finished> done;
    {
      std::lock_guard lock(finished_mutex_);
      done.swap(finished_);
    }
    for (auto& item : done) {
      trials_.erase(item.key);
      if (item.outcome) {
        metrics_.trial_reported(*item.outcome, item.took);
      } else if (item.frame.empty()) {
        metrics_.trial_stopped();
      } else {
        metrics_.attempt_failed();
      }
      // Sent, and kept until acknowledged; a stop's empty frame says nothing.
      session_.finished(item.key, std::move(item.frame), item.took);
    }
  }

  // The gauges, from this turn's state.
  void observe() {
    WorkerGauges now;
    {
      std::lock_guard lock(finished_mutex_);
      now.busy_slots = in_slots_;
    }
    now.slots = config_.slots;
    now.assignments = trials_.size();
    now.cache_bytes = cache_.bytes_used();
    now.cache_capacity = cache_.byte_cap();
    now.corrupt_drops = cache_.corrupt_drops();
    now.at = world_.monotonic_now();
    metrics_.observe(now);
  }

  const WorkerConfig& config_;
  World& world_;  // every clock and random number
  const sandbox::Cancellation& stop_;
  const Log& log_;
  WorkerMetrics metrics_;  // before cache_, whose evictions it counts
  BlobCache cache_;
  sandbox::ChildOptions child_;  // config_.child, with the scratch directory and pool
  // The slots' scratch directories: declared before the slots' arena, so
  // that it outlives every trial.
  std::optional<sandbox::ScratchPool> scratch_pool_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::optional<zmq::socket_t> monitor_;  // with keys: its handshakes (closed before socket_)
  UniqueFd wake_{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};  // written by slots
  tbb::global_control parallelism_;
  tbb::task_arena arena_;
  int exit_code_ = -1;
  std::uint64_t arrivals_ = 0;
  std::uint64_t unsent_ = 0;  // messages ZeroMQ would not queue since the last it did
  // The protocol's side of the worker: hellos, heartbeats, offers, reports
  // until acknowledged (after the socket and the cache it uses).
  WorkerSession session_{session_config(), [this](const std::string& frame) { return send(frame); },
                         log_, world_.monotonic_now()};
  // Owned by the loop thread; a slot reads only its own Trial, which stays
  // in the map (std::map nodes do not move) until its result is drained.
  std::map<AttemptKey, Trial> trials_;
  std::map<Digest, Fetch> fetches_;
  std::map<Digest, Digest> pin_of_archive_;  // pack archive -> its pin, as assignments said
  std::mutex finished_mutex_;
  std::deque<Finished> finished_;  // guarded by finished_mutex_
  std::size_t in_slots_ = 0;       // trials in the arena; guarded by finished_mutex_
  std::condition_variable idle_;   // in_slots_ reached 0
  transport::Probes probes_;
  std::optional<transport::HttpServer> http_;  // last: it stops before what it reads
};

}  // namespace

int stopped_from_outside(const sandbox::TrialVerdict& verdict) {
  if (verdict.stopped_by_net || verdict.exit_code >= 0) return 0;
  const int signal = -verdict.exit_code;
  for (int stop : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    if (signal == stop) return signal;
  }
  return 0;
}

int run_worker(const WorkerConfig& config, const sandbox::Cancellation& stop, const Log& log) {
  Worker worker(config, stop, log);
  return worker.run();
}

}  // namespace forktrial::worker
