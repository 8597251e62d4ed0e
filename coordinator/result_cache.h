// The result cache: a trial that was already run is answered from the
// recorded result and fork of the earlier one, without running it
// (docs/decisions/0088-result-cache.md).
//
// A trial's cache key is the digest of everything it depends on: the
// runtime that runs it (forktrial's version and the executor), the parent's
// history up to the fork point (the segment's digest, which names those
// bytes), and its specification (the parent and the fork point, the
// candidate's and the extra packs' pins and archives, the scenario, the
// limits) without its label, which names the fork and changes nothing a
// trial does. Two trials with one key are the same trial.
//
// The index lives in the store, not in memory: one root run per key,
// cache_run_of(key), whose last event is the key's entry: the trial that
// gave the result, its fork, its outcome and its verdict. An entry is
// written in the transaction that reconciles its trial, survives a restart
// and the archiving of its job, and dies with its fork (gc): an entry whose
// fork is gone is no entry, and the next run of the key writes a new one.
// A trial answered from an entry gets a copy of its fork, so its own result
// does not depend on the source's fork once written.
//
// Thread-safety: the functions are pure apart from the Snapshot or Writer
// they are given, and follow that object's rules (store/event_store.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/digest.h"
#include "coordinator/ids.h"
#include "pack/executor.h"
#include "sandbox/trial_types.h"
#include "schema/outcome.h"
#include "store/event_store.h"

namespace forktrial::coordinator {

// The type of a cache entry's event.
inline constexpr std::string_view kCacheEntryType = "cache.entry";

// What a trial's key is made of (a `runtime` such as "forktrial 0.9.0"),
// and whose: `owner`, the submitting client's key ("" without keys). An
// entry answers the trials of its owner alone, so that no client is handed
// a result only one worker vouched for on another client's behalf
// (docs/decisions/0088-result-cache.md). Costs one SHA-256 over the
// specification's canonical JSON.
Digest trial_cache_key(std::string_view runtime, pack::Executor executor,
                       const sandbox::TrialSpecification& spec, const Digest& segment,
                       std::span<const Digest> bundles, std::string_view owner);

// "forktrial.cache.<64 hex digits of the key>".
store::RunId cache_run_of(const Digest& key);

struct CacheEntry {
  TrialId source;     // the trial whose result it is
  store::RunId fork;  // that trial's fork
  Outcome outcome = Outcome::completed;
  std::string verdict;  // that trial's verdict, a JSON object (the log's)
  // The worker whose report it is ("" in entries written before it was
  // kept): every answer from the entry names it.
  WorkerId worker{};
  friend bool operator==(const CacheEntry&, const CacheEntry&) = default;
};

// The key's entry, read in `snapshot`: none when there is none, when its
// fork is not in the store (collected), or when its event is not one
// cache_entry_event writes (a damaged entry is no entry: the trial runs).
std::optional<CacheEntry> find_cache_entry(const store::Snapshot& snapshot, const Digest& key);
// The same in a write transaction, which nothing (gc) can change under it
// until it commits: the entry found there is the one the copy is made of.
std::optional<CacheEntry> find_cache_entry(const store::Writer& writer, const Digest& key);

// In the caller's write transaction: makes `entry` the key's, creating its
// run when it is the first. Returns the run's new head; the store's refusal
// otherwise.
store::Result<std::uint64_t> put_cache_entry(store::Writer& writer, const Digest& key,
                                             const CacheEntry& entry, Instant at);

// In the caller's write transaction: forks `spec`'s parent at its fork point
// as `fork`, and appends to it a copy of the events `source` appended after
// its own fork point (a fork of the same parent at the same event), each
// naming the new fork where the source's payload named the source's run id
// (the runtime's provenance.run_id, rt.run_id written by the candidate).
// Returns the new fork's head; the store's refusal otherwise (a fork id
// taken, the source gone).
store::Result<std::uint64_t> copy_fork(store::Writer& writer,
                                       const sandbox::TrialSpecification& spec,
                                       const store::NewRun& fork, const store::RunId& source);

}  // namespace forktrial::coordinator
