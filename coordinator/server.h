// The coordinator daemon: the one ROUTER endpoint workers and command-line
// clients connect to, the scheduler (coordinator/scheduler.h) fed by their
// messages and the clock, and the authoritative store, where every state
// change is an orchestration event before any peer hears of it and every
// trial's report is reconciled in one transaction with its fork.
//
// Threads: run_coordinator's thread owns the socket, the scheduler and the
// store's writes; with CURVE, the ZAP handler's thread answers handshakes
// from the allow list alone. A restart on the same store replays the
// orchestration log and goes on where the last commit left off.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/world.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/scheduler.h"
#include "coordinator/upload_spool.h"
#include "sandbox/cancellation.h"
#include "transport/curve.h"
#include "transport/http_server.h"

namespace forktrial::coordinator {

// How often time passes for the scheduler when no message comes (it passes
// at every turn too).
inline constexpr std::chrono::milliseconds kDefaultTick{100};

// Events appended after the log's last snapshot before it is compacted, at
// least (ServerConfig::compact_log_after): about a minute of a busy
// coordinator's records, and a restart's read of well under a second.
inline constexpr std::uint64_t kCompactLogAfter = 100'000;

struct ServerConfig {
  std::filesystem::path store;
  std::string listen;  // a ZeroMQ endpoint to bind: tcp://0.0.0.0:7600, ipc:///run/ft.sock
  SchedulerConfig scheduler;
  std::size_t max_frame_bytes = std::size_t{256} << 20;
  std::chrono::milliseconds tick = kDefaultTick;  // how often time passes for the scheduler
  // Group commit: what changed waits up to this long for more to share its
  // durable commit (and its replies wait with it). 0 commits every turn.
  std::chrono::microseconds commit_window{8000};
  // Trials queued (not yet leased) over every job, at most: a submission
  // that would pass it is refused whole.
  std::size_t max_queued = 1'000'000;
  // Bytes of trial text the jobs not yet archived may hold (their payloads,
  // and the parts of jobs being submitted), in all and per client key (all
  // clients are one without keys): a submission that would pass either is
  // refused whole. Trials are counted in bytes too, since one trial's text
  // may be up to 64 KiB.
  std::uint64_t max_queued_bytes = std::uint64_t{4} << 30;
  std::uint64_t max_client_bytes = std::uint64_t{1} << 30;
  // The operator says `http` is reachable by the operators alone. With
  // client keys the status page and /api/* (every client's jobs, names,
  // owners, candidates and failures) are served only on a loopback address
  // or on one said private so (docs/cluster.md, "Status page and JSON API").
  bool http_private = false;
  // CurveZMQ: with a keypair, the endpoint speaks CURVE only, admits only the
  // keys of `allowed`, and takes from each connection only the messages of
  // its key's role (a worker key cannot submit; a client key cannot join).
  std::optional<transport::Keypair> curve_key;
  transport::AllowList allowed;
  // The read-only HTTP endpoint (none: not served): /healthz, /readyz
  // (ready while the store takes writes), /metrics (coordinator/metrics.h).
  std::optional<transport::HttpAddress> http;
  // About the most trial text one event of a job.submitted record holds; a
  // larger job continues in job.trials events (coordinator/orchestration_log.h).
  std::size_t job_chunk_bytes = kJobChunkBytes;
  // The runtime a trial's result cache key names (coordinator/result_cache.h):
  // "" is this build's, "forktrial <version>". Results cached under another
  // runtime answer no trial.
  std::string runtime_version{};
  // Compaction of the orchestration log (coordinator/orchestration_log.h):
  // once the events after its last snapshot are at least
  // max(compact_log_after, compact_log_ratio x the snapshot's events), the
  // log is replaced by a snapshot of the state at the end of a turn, so a
  // restart reads O(live state) events and the log grows by at most that
  // many between snapshots. compact_log_after = 0: never.
  std::uint64_t compact_log_after = kCompactLogAfter;
  std::uint64_t compact_log_ratio = 4;
  // The clocks, randomness and free disk space the coordinator reads
  // (base/world.h); nullptr: real_world(). Not owned; outlives the
  // coordinator.
  World* world = nullptr;
  // Blobs clients upload spill to files under store/uploads, within these
  // limits (coordinator/upload_spool.h).
  UploadLimits uploads;
  // false: the store's commits are not flushed to the disk (MDB_NOSYNC). A
  // process crash still loses nothing committed; a power loss may. For
  // simulations and tests, whose machine does not lose power.
  bool durable = true;
  // Called after each commit with the orchestration records it made
  // durable, in their order (the simulation's referee reads them); none:
  // not called.
  std::function<void(std::span<const OrchestrationRecord>)> committed;
};

// Runs until `stop` is cancelled; returns 0, or throws forktrial::Error when
// the store or the endpoint cannot be opened, or the log does not replay.
int run_coordinator(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log);

// What a coordinator's start does to its store, without its endpoint: it
// takes the store's lock (a coordinator running there is refused, named),
// replays the log setting aside the records that do not apply, ends the
// attempts a report of which was not reconciled, and then compacts the log,
// so that it holds none of the records set aside. Returns those records
// (none: the log was whole, and is compacted all the same). Throws as
// run_coordinator does.
std::vector<SetAside> repair_log(const ServerConfig& config, const Log& log);

// The coordinator without its endpoint, in virtual time: run_coordinator's
// handling of peers' frames and its end of turn (one code path), fed by the
// caller (the simulation, the fuzz targets, tests) instead of a socket. Its
// clocks, randomness and free disk space are a VirtualWorld of its own
// (seeded with `seed`; the wall clock starts at `start`; config.world is not
// used),
// which each turn moves to its `now`, and which world() lets a test change
// (the disk filling, say). It opens the store and replays its log as
// run_coordinator does; config.listen and the CURVE settings are not used,
// so every frame is taken as if its connection's key had the role its
// message needs. Not thread-safe: one owner makes every call. Throws as
// run_coordinator does.
class CoordinatorCore {
 public:
  CoordinatorCore(const ServerConfig& config, const Log& log, std::uint64_t seed = 0,
                  Instant start = {});
  ~CoordinatorCore();
  CoordinatorCore(const CoordinatorCore&) = delete;
  CoordinatorCore& operator=(const CoordinatorCore&) = delete;

  // One turn of the coordinator's loop with one frame from the peer whose
  // routing id is `route`: time passes to `now` (never back), the frame is
  // handled (an error reply if it is not a message), time passes for the
  // scheduler, and what changed is committed, as a daemon's turn does.
  // Returns the turn's replies, (routing id, frame) each, in the order sent.
  std::vector<std::pair<std::string, std::string>> turn(const std::string& route,
                                                        std::string_view frame, Instant now);

  // One turn with every frame that came in it (the daemon takes up to 256 a
  // turn, and the ones its commit window gathers): each handled in order,
  // then one end of turn. No frame: time passes only, as when the daemon's
  // poll times out.
  struct Frame {
    std::string route;
    std::string bytes;
  };
  std::vector<std::pair<std::string, std::string>> turn(std::span<const Frame> frames, Instant now);

  // The scheduler as committed (between turns, everything decided is in the
  // store): for a referee to compare with what it was told.
  const Scheduler& scheduler() const;

  // The trial's status as its job's archive holds it, once the job is
  // archived (the scheduler then holds its counts only); none otherwise.
  std::optional<TrialStatus> archived_status(const TrialId& trial) const;

  // The core's world.
  VirtualWorld& world();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace forktrial::coordinator
