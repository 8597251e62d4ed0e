// A whole cluster in virtual time, from one seed. The coordinator is the
// shipped one: CoordinatorCore (coordinator/server.h), the daemon's handling
// of frames and its end of turn, on a real store, in a VirtualWorld
// (base/world.h) that the simulation moves. The network, the workers, the
// client and the faults are simulated, and they speak the real protocol:
// every message is a wire frame (schema/wire.capnp), encoded and decoded.
//
// The coordinator is driven as the daemon's loop drives it: a frame that
// arrives wakes it, the commit window (8 ms) gathers what follows, and one
// turn takes them all; with no frame, its poll times out every tick (100 ms)
// and time passes. Each simulated worker runs the real worker's session
// (worker/session.h: hellos, heartbeats, offers with the adaptive prefetch,
// reports kept until acknowledged); only its trials are simulated, each a
// drawn time in a slot, and it fetches nothing. The client submits each job
// in parts under a token, as `forktrial submit` does, and asks again when it
// hears nothing.
//
// The faults, each drawn from the seed:
//   - messages lost, duplicated, and delayed by a random time each, which
//     reorders them;
//   - workers that crash (and come back as a new incarnation after a while)
//     and workers that stall (every action of theirs waits, longer than a
//     lease);
//   - coordinator crashes: the core is destroyed (messages to it are lost),
//     then a new one starts on the same store and replays its log, as the
//     daemon does;
//   - the store's disk full for a while: the world refuses every commit, and
//     the core pauses and resumes as the daemon does;
//   - reports whose delta the store refuses (an event id the fork's history
//     holds), which the coordinator records without their delta.
// Faults happen during the first `Faults::chaos` of virtual time; then the
// network and the workers behave and the run must finish.
//
// Invariants, checked by an independent model fed with every committed
// record and every reply, at each step that commits or replies:
//   - every trial ends exactly once: reconciled at most once in the store,
//     and in the end reconciled, abandoned or cancelled, never two of these;
//   - nothing acknowledged is lost: a job acknowledged to its client and a
//     report acknowledged as accepted survive every restart (the replayed
//     scheduler has them, and its whole state equals the one that crashed);
//   - no job starves: while a job has queued trials, no job of a lower
//     priority is leased one, and the other jobs of its priority are leased
//     at most one each before it is (its round);
//   - leases never overlap: a trial is leased only when no lease of it is
//     live, with a higher attempt than any before; a report is accepted only
//     from the live lease's holder; a lost worker holds no lease.
// The first violation ends the run and is reported with the virtual time and
// the trial or job involved. The same configuration (seed included) gives the
// same run, event for event: Report::trace is a digest of every event
// handled and every frame the coordinator took and sent, in order.
//
// Not thread-safe: one simulation per thread; several may run at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "coordinator/scheduler.h"
#include "coordinator/server.h"

namespace forktrial::simulation {

using coordinator::Duration;

struct Faults {
  std::uint32_t loss = 0;         // per thousand messages, either way
  std::uint32_t duplication = 0;  // per thousand messages, either way
  Duration min_delay{1};          // each message's delay, drawn between the two
  Duration max_delay{20};
  // Per thousand workers, each virtual second of the chaos.
  std::uint32_t worker_crashes = 0;
  std::uint32_t worker_stalls = 0;
  std::uint32_t coordinator_crashes = 0;  // over the chaos, at random times
  std::uint32_t store_full = 0;           // episodes over the chaos
  Duration chaos{60'000};                 // faults only in this first stretch
};

// Faults of every kind at rates a short run meets all of.
Faults every_fault();

struct Config {
  std::uint64_t seed = 1;
  std::uint32_t workers = 20;
  std::uint32_t max_slots = 4;  // each worker has 1..max_slots slots
  std::uint64_t trials = 1'000;
  std::uint32_t jobs = 6;  // of random sizes and priorities 0..2; the third is cancelled
  Duration trial_min{300};
  Duration trial_max{3'000};
  Faults faults;
  coordinator::SchedulerConfig scheduler{Duration{5'000}, Duration{8'000}, 4};
  // Give up (a liveness failure) when the run has not finished by then; 0:
  // an hour more than ten times what the trials take on the fleet's slots.
  Duration give_up{0};
  // Compare the whole replayed state with the crashed one at each restart
  // (costs O(state) per restart).
  bool compare_replay = true;
  // The coordinator's ServerConfig::compact_log_after: small, and the log is
  // replaced by snapshots often.
  std::uint64_t compact_log_after = coordinator::kCompactLogAfter;
  std::uint64_t compact_log_ratio = 4;  // ServerConfig::compact_log_ratio
  // The run's directory, for the coordinator's store (created, and removed
  // when the run ends).
  std::filesystem::path store_dir;
  // Called with true when the simulation enters the coordinator's code, false
  // when it leaves: a caller can account the coordinator's allocations apart.
  std::function<void(bool)> coordinator_scope;
  // Called every virtual `progress_every` with the trials ended so far, and
  // once more when the run ends (the coordinator still holding everything).
  std::function<void(std::uint64_t ended, Duration virtual_time)> progress;
  Duration progress_every{10'000};
};

struct Report {
  std::uint64_t seed = 0;
  Duration virtual_time{0};
  double wall_seconds = 0;
  std::uint64_t events = 0;  // handled by the simulation
  std::uint64_t messages = 0;
  std::uint64_t lost = 0;
  std::uint64_t duplicated = 0;
  std::uint64_t reconciled = 0;
  std::uint64_t abandoned = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t fenced = 0;
  std::uint64_t requeued = 0;
  std::uint64_t duplicates = 0;  // reports acknowledged again
  std::uint64_t refused = 0;     // reports acknowledged "refused": the attempt failed
  // Reports whose delta the store refused, recorded (and acknowledged)
  // without it.
  std::uint64_t deltas_refused = 0;
  std::uint64_t workers_lost = 0;
  std::uint64_t worker_crashes = 0;
  std::uint64_t worker_stalls = 0;
  std::uint64_t coordinator_restarts = 0;
  std::uint64_t store_full_episodes = 0;
  std::uint64_t busy_replies = 0;  // answered "busy" while the store was full
  std::uint64_t records = 0;       // committed to the orchestration log
  std::uint64_t commits = 0;
  std::uint64_t log_generation = 0;  // the log's snapshots taken (its last one's generation)
  std::string trace;                 // hex digest of every event handled, in order
  // The first invariant broken, or the run not finishing: what, when, who.
  std::optional<std::string> violation;
};

// Runs the simulation to its end (every job finished) or to its first
// violation. Throws forktrial::Error for a configuration it cannot run (no
// workers, no trials, no store directory).
Report simulate(const Config& config);

}  // namespace forktrial::simulation
