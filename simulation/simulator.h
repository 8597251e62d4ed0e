// A whole cluster in virtual time, from one seed: the coordinator's scheduler
// (coordinator/scheduler.h) and its orchestration log in a real store
// (coordinator/orchestration_log.h, store/event_store.h) are the production
// code; the network, the workers, the clock and the faults are simulated.
//
// The simulated coordinator follows the real one's loop (coordinator/
// server.cc) message for message: a worker's hello starts an incarnation or,
// after a restart, reconnects keeping its leases; an offer of slots is
// answered with assignments, or parked while nothing is queued; a report is
// judged by the scheduler and reconciled in the turn's one store transaction,
// and acknowledged after the commit; a heartbeat renews leases and names the
// stale ones. Records are committed before any reply of the turn is sent. The
// simulated workers follow the real worker's (worker/worker.cc): hello until
// welcomed, heartbeats listing what they hold, offers of their free room, a
// report kept until acknowledged and sent again after the next welcome, a
// hello again when the coordinator is silent or does not know them.
//
// The faults, each drawn from the seed:
//   - messages lost, duplicated, and delayed by a random time each, which
//     reorders them;
//   - workers that crash (and come back as a new incarnation after a while)
//     and workers that stall (every action of theirs waits, longer than a
//     lease);
//   - coordinator crashes: it is down for a while (messages to it are lost),
//     then starts again from its log, as the real one does;
//   - the store full: a commit fails. The coordinator then drops what it had
//     not committed (it rebuilds its scheduler from the log), answers every
//     peer "busy" while the store stays full (no leases, no reconciliations,
//     no lease lapses), and resumes when a commit succeeds again, renewing
//     every live lease as after a restart.
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
// handled, in order.
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
  // The store's directory (created, and removed when the run ends).
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
  std::uint64_t workers_lost = 0;
  std::uint64_t worker_crashes = 0;
  std::uint64_t worker_stalls = 0;
  std::uint64_t coordinator_restarts = 0;
  std::uint64_t store_full_episodes = 0;
  std::uint64_t busy_replies = 0;  // answered "busy" while the store was full
  std::uint64_t records = 0;       // committed to the orchestration log
  std::uint64_t commits = 0;
  std::string trace;  // hex digest of every event handled, in order
  // The first invariant broken, or the run not finishing: what, when, who.
  std::optional<std::string> violation;
};

// Runs the simulation to its end (every job finished) or to its first
// violation. Throws forktrial::Error for a configuration it cannot run (no
// workers, no trials, no store directory).
Report simulate(const Config& config);

}  // namespace forktrial::simulation
