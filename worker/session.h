// The worker's side of the protocol, without its socket, slots or cache
// (sans-IO): which attempts it holds, which reports wait for an
// acknowledgement, when it says hello, heartbeats and offers its room, and
// how it takes each reply of the coordinator. The daemon (worker/worker.cc)
// and the simulation (simulation/simulator.cc) run this one implementation;
// the caller moves the frames, runs the trials and gives the time.
//
// The rules:
//   - hello at the start, again after a `failedPrecondition` error (the
//     coordinator does not know this worker: it restarted, or lost it), and
//     again when the coordinator has been silent for coordinator_timeout (at
//     most once a heartbeat);
//   - after a welcome, every report not yet acknowledged goes again;
//   - a heartbeat every `heartbeat`, and at least three per lease, listing
//     every attempt held (running or waiting for a slot);
//   - an offer of the room left (slots plus the prefetch the pace of recent
//     trials wants, prefetch_wanted) when nothing is offered already; an
//     offer unanswered for coordinator_timeout was lost, and an empty answer
//     that came straight back is followed by the next offer 100 ms after the
//     last;
//   - `unavailable` (the coordinator's store is full): what it refused goes
//     again a second later (the reports, or the hello while not welcomed; the
//     offer);
//   - any other error answering the hello: the coordinator will not take this
//     worker, which stops (refusal());
//   - any other error: logged by the caller; an offer goes again;
//   - a goodbye when the caller stops, if the coordinator welcomed this
//     worker, so that it requeues what the worker held at once rather than
//     when the leases lapse.
//
// Not thread-safe: one owner (the worker's loop thread) makes every call.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/log.h"
#include "schema/wire_codec.h"

namespace forktrial::worker {

// What a frame of the coordinator is for the caller once the session took
// it: done (the session's alone), or one the caller acts on too.
enum class Received {
  done,         // welcome, ok, a report's acknowledgement, outOfOrder, busy
  assignments,  // the caller accepts each (hold())
  stop,         // the caller stops each it runs (release() those not started)
  blob_chunk,   // a fetch's
  error,        // an error the session does not handle (a fetch's, say)
  refused,      // the coordinator refused this worker: refusal() says why
  unknown,      // not a message for a worker
};

// One attempt of one trial, as the wire names it.
struct AttemptKey {
  std::string job;
  std::uint32_t index = 0;
  std::uint32_t attempt = 0;
  friend auto operator<=>(const AttemptKey&, const AttemptKey&) = default;
  std::string str() const;
};

void set_ref(schema::wire::TrialRef::Builder ref, const AttemptKey& key);
AttemptKey attempt_key(schema::wire::TrialRef::Reader ref);

// The frame saying an attempt could not be run, and why.
std::string failure_frame(const AttemptKey& key, const std::string& reason);

// Assignments a worker holds beyond its `slots`: as many as cover
// kPrefetchCover at `mean_trial_us` (the recent slot time of a trial; 0 when
// none has been timed yet, which wants one), at least one, at most
// `prefetch`, and none when `prefetch` is 0. Long trials want one ready at
// most: more would only wait on this worker while another had nothing to do.
inline constexpr std::chrono::milliseconds kPrefetchCover{50};
std::size_t prefetch_wanted(unsigned prefetch, unsigned slots, double mean_trial_us);

// An executor the worker offers (pack/executor.h names them), with the
// version it runs: the hello lists them, and a report names the one that ran.
struct ExecutorOffer {
  std::string name;
  std::string version;
  friend bool operator==(const ExecutorOffer&, const ExecutorOffer&) = default;
};

struct SessionConfig {
  std::string worker_id;
  unsigned slots = 1;
  unsigned prefetch = 8;  // the most assignments held beyond the slots
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds coordinator_timeout{5000};
  std::vector<std::string> warnings;                  // the hello's: nets degraded on this host
  std::string isolation = "{}";                       // the hello's: its guarantees, as JSON
  std::vector<ExecutorOffer> executors{{"lua", ""}};  // the hello's: what it can run
  // What the cache holds, for the hello (none: nothing).
  std::function<std::vector<Digest>()> cached;
  // Called as each hello goes (none: not called).
  std::function<void()> said_hello;
};

class WorkerSession {
 public:
  using Clock = std::chrono::steady_clock;
  // `send` puts a frame on the wire; false when it could not (the frame is
  // sent again in its time: an offer at the next step, a report after the
  // next welcome or busy).
  WorkerSession(SessionConfig config, std::function<bool(const std::string&)> send, const Log& log,
                Clock::time_point now);

  // Says hello.
  void start(Clock::time_point now);

  // A frame of the coordinator, decoded. For assignments, stops, chunks and
  // other errors the caller goes on with the envelope.
  Received receive(schema::wire::Envelope::Reader envelope, Clock::time_point now);

  // The caller holds this attempt now (accepted, waiting for or in a slot),
  // or no longer does (stopped before it started, or it could not be
  // prepared: a failure frame goes through finished()).
  void hold(const AttemptKey& key);
  void release(const AttemptKey& key);
  bool holds(const AttemptKey& key) const { return held_.contains(key); }
  std::size_t held() const { return held_.size(); }

  // An attempt ended: `frame` (a report, or a failure) is sent and kept
  // until acknowledged; empty: stopped, nothing to say. `took`: its time in
  // a slot (zero when it never ran), which paces the prefetch.
  void finished(const AttemptKey& key, std::string frame, Clock::duration took);

  // Time passes: heartbeats, the hello after silence, what `busy` refused,
  // and the offer of the room left.
  void step(Clock::time_point now);

  // When step() next has something to do (for a caller that sleeps until
  // then, as the simulation does).
  Clock::time_point next_step() const;

  // The caller stops, its trials killed: says goodbye (`reason`, for
  // people: "stopped by SIGTERM") and returns the request id its answer
  // (`ok`, or an error) will carry. None when there is nobody to tell (the
  // coordinator has not welcomed this worker) or the frame could not be
  // sent. The caller waits for the answer as long as it likes, and no
  // longer: a goodbye is best-effort. The session is done after it.
  std::optional<std::uint64_t> goodbye(const std::string& reason);

  // A request id for the caller's own requests (fetches), unique with the
  // session's.
  std::uint64_t next_request_id() { return ++request_id_; }

  bool welcomed() const { return welcomed_; }
  std::size_t unacknowledged() const { return unacked_.size(); }
  const std::optional<std::string>& refusal() const { return refusal_; }

 private:
  void say_hello(Clock::time_point now);
  void send_heartbeat(Clock::time_point now);
  void offer(Clock::time_point now);
  Clock::duration heartbeat_every() const;

  SessionConfig config_;
  std::function<bool(const std::string&)> send_;
  const Log& log_;
  std::uint64_t request_id_ = 0;
  std::uint64_t hello_request_ = 0;  // the request id of the latest hello
  bool welcomed_ = false;
  std::chrono::milliseconds lease_{30000};
  bool busy_ = false;                           // the coordinator said its store is full
  std::optional<Clock::time_point> resend_at_;  // of what it refused as busy
  bool work_requested_ = false;
  Clock::time_point work_requested_at_;
  Clock::time_point next_request_;
  Clock::time_point last_heard_;
  Clock::time_point last_hello_;
  Clock::time_point last_heartbeat_;
  double mean_trial_us_ = 0;  // moving average of slot time per trial; 0: none yet
  std::set<AttemptKey> held_;
  std::map<AttemptKey, std::string> unacked_;  // reports sent, not yet acknowledged
  std::optional<std::string> refusal_;
};

}  // namespace forktrial::worker
