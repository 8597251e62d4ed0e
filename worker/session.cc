#include "worker/session.h"

#include <capnp/message.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace forktrial::worker {
namespace {

using schema::wire::Envelope;

// What the coordinator refused as busy (its store is full) goes again after this.
constexpr auto kBusyRetry = std::chrono::seconds(1);
// An empty answer that came straight back is followed by the next offer
// this long after the last.
constexpr auto kEmptyAnswerWait = std::chrono::milliseconds(100);
// The most often a worker heartbeats: a welcome's lease of 0 (or one so
// large it wraps) cannot make it heartbeat at every turn of its loop.
constexpr auto kMinHeartbeat = std::chrono::milliseconds(100);
// The longest lease a welcome is taken to name.
constexpr std::chrono::milliseconds kLongestLease = std::chrono::hours(24);

}  // namespace

std::string AttemptKey::str() const {
  return job + "#" + std::to_string(index) + " attempt " + std::to_string(attempt);
}

void set_ref(schema::wire::TrialRef::Builder ref, const AttemptKey& key) {
  ref.setJob(key.job);
  ref.setIndex(key.index);
  ref.setAttempt(key.attempt);
}

AttemptKey attempt_key(schema::wire::TrialRef::Reader ref) {
  return {wire::text(ref.getJob()), ref.getIndex(), ref.getAttempt()};
}

std::string failure_frame(const AttemptKey& key, const std::string& reason) {
  wire::MessageBuilder message;
  auto failed = wire::start(message, 0).initAttemptFailed();
  set_ref(failed.initTrial(), key);
  failed.setReason(reason);
  return wire::encode(message);
}

std::size_t prefetch_wanted(unsigned prefetch, unsigned slots, double mean_trial_us) {
  if (prefetch == 0) return 0;
  if (!(mean_trial_us > 0)) return 1;
  // The trials the slots get through in kPrefetchCover, rounded up; the
  // clamp comes before the conversion, which a huge quotient would overflow.
  const double cover = std::chrono::duration<double, std::micro>(kPrefetchCover).count() *
                       std::max(slots, 1u) / mean_trial_us;
  return static_cast<std::size_t>(std::clamp(std::ceil(cover), 1.0, double(prefetch)));
}

WorkerSession::WorkerSession(SessionConfig config, std::function<bool(const std::string&)> send,
                             const Log& log, Clock::time_point now)
    : config_(std::move(config)),
      send_(std::move(send)),
      log_(log),
      work_requested_at_(now),
      next_request_(now),
      last_heard_(now),
      last_hello_(now),
      last_heartbeat_(now) {}

void WorkerSession::start(Clock::time_point now) {
  say_hello(now);
}

void WorkerSession::say_hello(Clock::time_point now) {
  work_requested_ = false;
  if (config_.said_hello) config_.said_hello();
  wire::MessageBuilder message;
  hello_request_ = ++request_id_;
  auto hello = wire::start(message, hello_request_).initWorkerHello();
  hello.setWorkerId(config_.worker_id);
  hello.setSlots(config_.slots);
  hello.setPrefetch(config_.prefetch);
  auto warnings = hello.initWarnings(static_cast<unsigned>(config_.warnings.size()));
  for (unsigned i = 0; i < config_.warnings.size(); ++i) warnings.set(i, config_.warnings[i]);
  hello.setIsolation(config_.isolation);
  auto executors = hello.initExecutors(static_cast<unsigned>(config_.executors.size()));
  for (unsigned i = 0; i < config_.executors.size(); ++i) {
    executors[i].setName(config_.executors[i].name);
    executors[i].setVersion(config_.executors[i].version);
  }
  // A bounded summary: the coordinator only uses it to prefer this worker.
  std::vector<Digest> held = config_.cached ? config_.cached() : std::vector<Digest>{};
  if (held.size() > 4096) held.resize(4096);
  auto cached = hello.initCached(static_cast<unsigned>(held.size()));
  for (unsigned i = 0; i < held.size(); ++i) wire::set_digest(cached[i], held[i]);
  send_(wire::encode(message));
  last_hello_ = now;
}

Received WorkerSession::receive(Envelope::Reader envelope, Clock::time_point now) {
  last_heard_ = now;
  switch (envelope.which()) {
    case Envelope::WELCOME:
      welcomed_ = true;
      // Bounded: a lease past a day would only overflow the clock's
      // arithmetic; the heartbeat is what the lease paces.
      lease_ = std::chrono::milliseconds(
          std::min<std::uint64_t>(envelope.getWelcome().getLeaseMillis(), kLongestLease.count()));
      work_requested_ = false;
      for (const auto& [key, frame] : unacked_) send_(frame);
      return Received::done;
    case Envelope::ASSIGNMENTS:
      if (busy_) log_(LogLevel::info, "the coordinator takes work again");
      busy_ = false;
      work_requested_ = false;
      // An empty answer that waited at the coordinator (it holds an offer
      // until there is work) is followed by the next offer at once; one
      // that came straight back, 100 ms after the last.
      if (envelope.getAssignments().getAssignments().size() == 0) {
        next_request_ = work_requested_at_ + kEmptyAnswerWait;
      }
      return Received::assignments;
    case Envelope::REPORT_ACK: {
      const auto ack = envelope.getReportAck();
      const AttemptKey key = attempt_key(ack.getTrial());
      unacked_.erase(key);
      // Nothing to send again either way; a refusal says what this worker
      // sent that the coordinator would not take.
      if (ack.getVerdict() == schema::wire::ReportVerdict::REFUSED) {
        log_(LogLevel::warn, "the coordinator refused the report of " + key.str() + ": " +
                                 wire::prose(ack.getReason(), 1024));
      }
      return Received::done;
    }
    case Envelope::STOP_TRIALS:
      return Received::stop;
    case Envelope::BLOB_CHUNK:
      return Received::blob_chunk;
    case Envelope::OK:
      return Received::done;
    case Envelope::ERROR: {
      const Status error = wire::status_of(envelope.getError());
      if (error.code == ErrorCode::unavailable) {
        // Its store is full: what it refused (a hello, an offer, a report)
        // goes again a second later; reports wait unacknowledged.
        if (!busy_) log_(LogLevel::warn, error.message + "; trying again every second");
        busy_ = true;
        work_requested_ = false;
        next_request_ = now + kBusyRetry;
        resend_at_ = now + kBusyRetry;
        return Received::done;
      }
      if (!welcomed_ && envelope.getRequestId() == hello_request_) {
        // The hello itself was refused: saying it again would not help.
        refusal_ = error.message;
        return Received::refused;
      }
      if (error.code == ErrorCode::failed_precondition) {
        // The coordinator does not know this worker (it restarted, or lost
        // it).
        welcomed_ = false;
        say_hello(now);
        return Received::done;
      }
      // An error of an offer, or of the caller's own request: the offer
      // goes again.
      work_requested_ = false;
      return Received::error;
    }
    default:
      return Received::unknown;
  }
}

void WorkerSession::hold(const AttemptKey& key) {
  held_.insert(key);
}

void WorkerSession::release(const AttemptKey& key) {
  held_.erase(key);
}

void WorkerSession::finished(const AttemptKey& key, std::string frame, Clock::duration took) {
  held_.erase(key);
  if (took > Clock::duration::zero()) {
    const double us = std::chrono::duration<double, std::micro>(took).count();
    mean_trial_us_ = mean_trial_us_ <= 0 ? us : 0.8 * mean_trial_us_ + 0.2 * us;
  }
  if (frame.empty()) return;
  send_(frame);
  unacked_[key] = std::move(frame);
}

WorkerSession::Clock::duration WorkerSession::heartbeat_every() const {
  // Well inside the lease, whatever the configured interval; never more
  // often than kMinHeartbeat, whatever lease a coordinator names.
  return std::max<Clock::duration>(kMinHeartbeat,
                                   std::min<Clock::duration>(config_.heartbeat, lease_ / 3));
}

void WorkerSession::step(Clock::time_point now) {
  if (welcomed_ && now - last_heartbeat_ >= heartbeat_every()) send_heartbeat(now);
  if (now - last_heard_ >= config_.coordinator_timeout && now - last_hello_ >= config_.heartbeat) {
    if (welcomed_) log_(LogLevel::warn, "the coordinator is silent; saying hello again");
    welcomed_ = false;
    say_hello(now);
  }
  if (resend_at_ && now >= *resend_at_) {
    resend_at_.reset();
    if (welcomed_) {
      for (const auto& [key, frame] : unacked_) send_(frame);
    } else {
      say_hello(now);  // the hello was refused; the reports follow the welcome
    }
  }
  offer(now);
}

std::optional<std::uint64_t> WorkerSession::goodbye(const std::string& reason) {
  if (!welcomed_) return std::nullopt;
  wire::MessageBuilder message;
  const std::uint64_t request = ++request_id_;
  wire::start(message, request).initWorkerGoodbye().setReason(reason);
  if (!send_(wire::encode(message))) return std::nullopt;
  welcomed_ = false;
  return request;
}

void WorkerSession::send_heartbeat(Clock::time_point now) {
  wire::MessageBuilder message;
  auto heartbeat = wire::start(message, ++request_id_).initHeartbeat();
  auto running = heartbeat.initRunning(static_cast<unsigned>(held_.size()));
  unsigned i = 0;
  for (const AttemptKey& key : held_) set_ref(running[i++], key);
  send_(wire::encode(message));
  last_heartbeat_ = now;
}

void WorkerSession::offer(Clock::time_point now) {
  // An offer of slots not answered in time was lost: offer again.
  if (work_requested_ && now - work_requested_at_ >= config_.coordinator_timeout) {
    work_requested_ = false;
  }
  if (!welcomed_ || work_requested_ || now < next_request_) return;
  // Room for running trials and prefetched ones alike.
  const std::size_t room =
      std::size_t{config_.slots} + prefetch_wanted(config_.prefetch, config_.slots, mean_trial_us_);
  if (held_.size() >= room) return;
  wire::MessageBuilder message;
  wire::start(message, ++request_id_)
      .initRequestWork()
      .setFreeSlots(static_cast<std::uint32_t>(room - held_.size()));
  if (!send_(wire::encode(message))) return;  // offered again at the next step
  work_requested_ = true;
  work_requested_at_ = now;
}

WorkerSession::Clock::time_point WorkerSession::next_step() const {
  Clock::time_point next =
      std::max(last_heard_ + config_.coordinator_timeout, last_hello_ + config_.heartbeat);
  if (welcomed_) next = std::min(next, last_heartbeat_ + heartbeat_every());
  if (resend_at_) next = std::min(next, *resend_at_);
  if (welcomed_ && work_requested_) {
    next = std::min(next, work_requested_at_ + config_.coordinator_timeout);
  } else if (welcomed_ &&
             held_.size() < std::size_t{config_.slots} +
                                prefetch_wanted(config_.prefetch, config_.slots, mean_trial_us_)) {
    next = std::min(next, next_request_);  // an offer to make
  }
  return next;
}

}  // namespace forktrial::worker
