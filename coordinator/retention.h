// Retention: what is kept of a finished job's trials' forks, and the
// collection that applies it to a store (`forktrial gc`).
//
// A trial's fork (run_<job>_<index>_a<attempt>) holds what its candidate
// appended; its result (outcome, counts, detail) is in its `trial.settled`
// event of the orchestration log and never goes. A policy keeps every fork, only
// the forks of trials that did not complete (a failure is what one wants to
// replay and inspect), or none, once the job has been finished for a while.
// Local trials' forks (run_trial_...) have no result in the store, so only
// `none` collects them, by their age. Runs a user imported or made, and the
// orchestration log, are never touched.
//
// Blobs (pack bundles' archives, segments) go when nothing needs them: a
// blob no unfinished job's trial names (its bundles and its segment) and last
// stored or touched (store::Writer::touch_blobs) at least `blob_grace` ago.
// The grace protects what the log does not name yet: a client's upload before
// its submission (findMissing, putBlob, submitJob), a job still arriving in
// parts, a job recorded after the plan's snapshot. The coordinator touches
// every digest findMissing finds and every digest of a submission before it
// records the job, and apply_gc_blobs deletes only blobs still older than the
// grace in the transaction that deletes them, so a blob touched after the
// plan stays (docs/decisions/0091-gc-collects-blobs.md).
//
// plan_gc reads a snapshot (the log replayed through the scheduler, the way a
// coordinator starts, and the list of runs) and decides; apply_gc deletes in
// batches, one transaction each, so a coordinator writing the same store
// waits at most one batch. A fork some other run forks from is kept (its
// history would lose events).
//
// Thread-safety: free functions over the store's own rules
// (store/event_store.h). Errors: plan_gc returns the log's corruption as a
// Status; the store's failures throw StoreError.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "coordinator/ids.h"
#include "coordinator/orchestration.h"
#include "store/event_store.h"

namespace forktrial::coordinator {

// KeepForks and RetentionPolicy are plain values of coordinator/orchestration.h
// (a job records its own), with their parsers (parse_keep_forks,
// parse_retention_age). A job's own policy, when it has one, is applied
// to it in place of the one plan_gc is given.

struct GcPlan {
  std::vector<store::RunId> forks;      // to delete, in the order of their jobs
  std::uint64_t jobs_collected = 0;     // finished long enough ago: the policy applied
  std::uint64_t jobs_too_recent = 0;    // finished less than `after` ago
  std::uint64_t jobs_unfinished = 0;    // never touched
  std::uint64_t forks_kept = 0;         // of collected jobs, kept by the policy
  std::uint64_t forks_gone = 0;         // of collected jobs, deleted before
  std::uint64_t forks_forked_from = 0;  // kept: another run forks from them
  std::uint64_t local_forks = 0;        // run_trial_... among `forks`
  std::uint64_t local_forks_kept = 0;   // run_trial_... kept (too young, or not `none`)
  std::uint64_t jobs_own_policy = 0;    // of the collected, those with a policy of their own
  std::vector<Digest> blobs;       // to delete: needed by no unfinished job, older than the grace
  std::uint64_t blob_bytes = 0;    // their sizes
  std::uint64_t blobs_needed = 0;  // kept: an unfinished job's trial names them
  std::uint64_t blobs_recent = 0;  // kept: stored or touched within the grace
  // Kept: stored by an older build, of unknown age. A gc that is not a dry
  // run stamps them (store::Writer::touch_blobs), so a later one may take them.
  std::vector<Digest> blobs_unstamped;
  std::string blobs_stored_before;  // the cutoff: now - grace, as a store timestamp
  friend bool operator==(const GcPlan&, const GcPlan&) = default;
};

// How long a blob stays after it was last stored or touched, whatever needs it.
inline constexpr Duration kDefaultBlobGrace = std::chrono::hours(1);

// What `policy` collects in the store as of `now`, blobs by `blob_grace`. An
// error when the orchestration log does not replay (a corrupt log).
std::expected<GcPlan, Status> plan_gc(const store::Snapshot& snapshot,
                                      const RetentionPolicy& policy, Instant now,
                                      Duration blob_grace = kDefaultBlobGrace);

struct GcResult {
  store::DeletedRuns deleted;
  std::vector<std::string> skipped;  // forks not deleted, and why (forked from meanwhile)
};

// Deletes `forks`, `batch` per transaction, calling `progress` with the count
// done after each. A batch the store refuses (a fork forked from since the
// plan) is deleted one run at a time, the refused ones skipped.
GcResult apply_gc(store::EventStore& store, std::span<const store::RunId> forks, std::size_t batch,
                  const std::function<void(std::uint64_t done)>& progress);

// Deletes the planned blobs still stored before `stored_before` (the plan's
// cutoff), `batch` per transaction, calling `progress` with the count done
// after each. A blob touched since the plan is kept, counted in kept_recent.
store::DeletedBlobs apply_gc_blobs(store::EventStore& store, std::span<const Digest> blobs,
                                   std::string_view stored_before, std::size_t batch,
                                   const std::function<void(std::uint64_t done)>& progress);

}  // namespace forktrial::coordinator
