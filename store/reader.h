// The read side of the store over one transaction, read-only (a Snapshot's)
// or read-write (a Writer's, which then sees its own writes). Private to the
// store.
//
// A run's history is not stored in one place: a fork reads its ancestors'
// events up to its fork point, then its own (docs/store-format.md, "events").
// TxnReader resolves that lineage into ranges of stored events and walks,
// searches and streams them.
//
// Lifetimes: an EventView handed to a visit points into the map and is valid
// only while that visit runs (store/event.h). Errors: a run named as a parent that
// has no record, or a history with gaps, throws StoreError ("the store is
// corrupt"); LMDB failures throw LmdbError.
//
// Thread-safety: a TxnReader belongs to the thread using its transaction; it
// is cheap to make one per call.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "store/codec.h"
#include "store/environment.h"
#include "store/event_store.h"
#include "store/segment.h"

namespace forktrial::store {

// A contiguous stretch of a run's history stored under one run number:
// seqs [lower, upper] of run `number`.
struct Range {
  std::uint64_t number;
  std::uint64_t lower;
  std::uint64_t upper;
};

class TxnReader {
 public:
  // `dbis` and `txn` must outlive the reader.
  TxnReader(const Dbis& dbis, MDB_txn* txn) : dbis_(dbis), txn_(txn) {}

  // The record of run `id`; nullopt when there is none (or the id could not
  // be a key).
  std::optional<codec::RunRecord> record(const RunId& id) const;
  // The record of a run the store names as a parent; throws StoreError when
  // it is missing.
  codec::RunRecord record_or_corrupt(const RunId& id) const;

  // The seq of the last event stored under run `number`, 0 if none.
  std::uint64_t own_last(std::uint64_t number) const;
  // The run's head: its last own event, else its fork point, else 0.
  std::uint64_t head(const codec::RunRecord& r) const;
  RunInfo info(const codec::RunRecord& r) const;

  // The stretches of stored events that make up the run's history, oldest
  // first: the run's own events last, each ancestor's contribution before.
  std::vector<Range> lineage(const codec::RunRecord& run) const;
  // The part of the lineage the run inherits: lineage() without the run's own
  // range.
  std::vector<Range> inherited(const codec::RunRecord& run) const;

  // The seq of event `event_id` within `ranges`; a hit in an ancestor's index
  // counts only inside the part of it the ranges cover.
  std::optional<std::uint64_t> find_seq(const std::vector<Range>& ranges,
                                        std::string_view event_id) const;

  // Streams the segment of the history up to `up_to_seq` (store/segment.h).
  void stream_segment(const codec::RunRecord& run, std::uint64_t up_to_seq,
                      const SegmentWriter::Sink& sink) const;

  // The history of `run` from `from_seq` on, decoded; see
  // Snapshot::for_each_event. A decoder per call, so a visit that reads the
  // same transaction again does not overwrite the buffer its view may use.
  void visit(const codec::RunRecord& run, std::uint64_t from_seq,
             const std::function<bool(const EventView&)>& visit) const;

  std::optional<Event> find_event(const codec::RunRecord& run, std::string_view id) const;
  std::vector<Event> events_of_type(const codec::RunRecord& run, std::string_view type,
                                    std::uint64_t after_seq) const;

 private:
  // Calls `visit(seq, stored value)` for each event of the history with
  // from_seq <= seq <= to_seq, in order; stops when visit returns false.
  // Defined and used in reader.cc only.
  template <typename Visit>
  void scan(const std::vector<Range>& ranges, std::uint64_t from_seq, std::uint64_t to_seq,
            Visit&& visit) const;

  const Dbis& dbis_;
  MDB_txn* txn_;
};

}  // namespace forktrial::store
