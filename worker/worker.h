// The worker daemon: joins a coordinator, pulls trials for its free slots,
// fetches what they need by digest into its blob cache, materializes each
// bundle once, runs every trial in a fresh forktrial-child through the
// sandbox (execute_trial), and reports the verdict and the accepted delta
// back. The coordinator records; the worker never holds the authoritative
// store.
//
// Threads: run_worker's thread owns the ZeroMQ socket and every piece of
// protocol state; trials run in a oneTBB arena of `slots` threads and hand
// their results back through a queue the loop drains. Nothing else shares
// state.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/world.h"
#include "sandbox/cancellation.h"
#include "sandbox/trial.h"
#include "transport/curve.h"
#include "transport/http_server.h"
#include "worker/session.h"

namespace forktrial::worker {

struct WorkerConfig {
  std::string coordinator;  // a ZeroMQ endpoint, tcp://host:port or ipc://path
  std::filesystem::path cache_dir;
  std::uint64_t cache_bytes = std::uint64_t{4} << 30;
  unsigned slots = 1;
  // The most assignments held beyond the slots, fetched and ready, so a slot
  // that frees starts its next trial at once instead of waiting a round trip
  // to the coordinator (and its durable lease record). The worker holds as
  // many as cover 50 ms at the pace of its recent trials, at least one.
  unsigned prefetch = 8;
  std::string worker_id;  // unique per worker; empty: <hostname>-<pid>
  sandbox::ChildOptions child;
  std::chrono::milliseconds heartbeat{1000};
  // A coordinator silent for this long is presumed restarted: the worker
  // says hello again (its unacknowledged reports are sent again then).
  std::chrono::milliseconds coordinator_timeout{5000};
  std::vector<std::string> preflight_warnings;  // what preflight said at start
  std::string isolation;                        // its guarantees, as JSON
  // What it offers to run: Lua always; activegraph when the tool found it
  // and its child answered preflight (child.activegraph is then set).
  std::vector<ExecutorOffer> executors{{"lua", ""}};
  // Messages ZeroMQ holds for the coordinator while it does not take them
  // (its send high-water mark); past it a message is not sent, logged, and
  // sent again later.
  unsigned send_queue = 1000;
  // CurveZMQ: its keypair and the coordinator's public key (none: plain).
  std::optional<transport::ClientKeys> keys;
  // The read-only HTTP endpoint (none: not served): /healthz, /readyz
  // (ready while the coordinator has welcomed this worker), /metrics
  // (worker/metrics.h).
  std::optional<transport::HttpAddress> http;
  // Why the worker stops, for its goodbye ("stopped by SIGTERM"); asked
  // once the stop came. None: "stopped".
  std::function<std::string()> stop_reason;
  // How long a stopping worker waits for the answer to its goodbye before it
  // exits all the same: a coordinator that is gone or slow never holds up
  // the stop (its leases then lapse, as without a goodbye).
  std::chrono::milliseconds goodbye_wait{1000};
  // The clocks and randomness the worker reads (base/world.h); nullptr:
  // real_world(). Not owned; outlives the worker.
  World* world = nullptr;
};

// Runs until `stop` is cancelled; returns 0, or non-zero when the worker
// cannot go on (the coordinator refused it, the cache cannot be opened).
// Running trials are killed on stop; then a welcomed worker says goodbye
// (config.stop_reason), waiting at most config.goodbye_wait for the answer,
// so that the coordinator requeues its leases at once.
// The signal that stopped a trial's child from outside the worker, or 0. The
// sandbox ends a child only with SIGKILL (its nets, a cancel) or SIGXCPU (its
// CPU net), and a child never signals itself; SIGTERM, SIGINT, SIGHUP or
// SIGQUIT came from something stopping the host's processes, as a cluster
// manager stopping a worker signals every process of its job, the trials'
// children too (scancel; systemd's control-group kill). Such a death says
// nothing about the trial: the worker reports the attempt failed, so the
// trial runs again, instead of recording it crashed.
int stopped_from_outside(const sandbox::TrialVerdict& verdict);

int run_worker(const WorkerConfig& config, const sandbox::Cancellation& stop, const Log& log);

}  // namespace forktrial::worker
