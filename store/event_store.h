// The event-sourced store: runs, their append-only event logs, forks by
// reference, segments, and content-addressed blobs, in one LMDB environment.
// The on-disk layout is docs/store-format.md.
//
// Thread-safety: an EventStore may be used from any number of threads at once.
// Write transactions are serialized (LMDB allows one at a time per
// environment; a second writer waits for the first, in this process or in
// another). Readers never block writers and writers never block readers
// (LMDB's MVCC): a Snapshot sees the store as of its creation, whatever is
// written afterwards. A Snapshot is used by one thread at a time, may be handed
// between threads (any thread may use it next, or end it), and must not
// outlive its EventStore.
//
// The map: LMDB maps the store into memory, and changes the size of the map
// only while no transaction of the process is open; a Snapshot's views point
// into the map until it ends. When a write needs a larger map, or another
// process has written past this process's map (LMDB's MDB_MAP_RESIZED; the
// store then adopts that process's map size), the write or the new Snapshot
// that needs the change first waits for every open transaction of this
// process to end. An open Snapshot is held by the thread that opened it, or by
// the last thread that called it. A thread never waits for a Snapshot it holds
// itself: its write or new Snapshot fails at once with ResizeBlocked. It waits
// for other threads' transactions up to StoreOptions::grow_wait, then fails
// the same way; transactions begun meanwhile are waited for too, not held
// back. The map changes rarely with the default sizes (it starts at 4 GiB and
// doubles), but a thread holding a Snapshot should not make writes that may
// grow the store.
//
// Each open Snapshot takes one of LMDB's 1024 reader slots, which all the
// processes using the store share; opening one more throws StoreError
// (MDB_READERS_FULL).
//
// Open a store directory at most once per process (LMDB's rule: a second
// handle in the same process would break its locking); the constructor
// refuses a second open of the same directory with StoreError.
//
// Errors: outcomes a caller is expected to handle (an unknown run, a moved
// head, a duplicate event id, a bad segment) are returned as `Refusal` values
// in a `Result`; lookups that may find nothing return std::optional.
// Failures of the environment (I/O errors, a full store, an unknown schema
// version, corruption) throw StoreError or one of its subclasses.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "store/event.h"
#include "store/ids.h"

namespace forktrial::store {

// The schema version this build writes into a new store, and the oldest it
// reads and writes too (docs/store-format.md, "Versioning"): version 2 may
// hold deflated events, version 1 never does.
inline constexpr std::uint32_t kSchemaVersion = 2;
inline constexpr std::uint32_t kOldestSchemaVersion = 1;

enum class Refused {
  unknown_run,         // no run with that id
  unknown_event,       // no event with that id in the run's history
  run_exists,          // a run with that id is already stored
  head_moved,          // the run's head is not the one the append expected
  duplicate_event_id,  // the event id is already in the run's history (or the batch)
  invalid_event,       // a text field breaking the text rule (store/event.h)
  invalid_segment,     // segment bytes that are not a canonical segment
  invalid_input,       // a run id, label or created_at breaking the text rule (store/event.h),
                       // a malformed import file, or a request that does not apply
};

// A Status (base/error.h) with the store's finer kind. The category follows
// from the kind: unknown_run and unknown_event are not_found; run_exists,
// head_moved and duplicate_event_id are conflict; the invalid_* kinds are
// invalid_argument.
struct Refusal : Status {
  Refused kind;

  Refusal(Refused refused, std::string why)
      : Status{code_of(refused), std::move(why)}, kind(refused) {}
  static ErrorCode code_of(Refused kind);

  friend bool operator==(const Refusal&, const Refusal&) = default;
};

template <typename T>
using Result = std::expected<T, Refusal>;

// A failure of the store's environment. Its category (base/error.h) is
// internal unless a subclass says otherwise.
class StoreError : public Error {
 public:
  explicit StoreError(const std::string& message, ErrorCode code = ErrorCode::internal)
      : Error(code, message) {}
};

// The write needs more room than StoreOptions::max_map_size allows, or the
// disk holding the store has none left (ENOSPC, EDQUOT). Nothing of the
// failed write was kept; the store stays readable, and writable for smaller
// writes or once the disk has room.
class StoreFull : public StoreError {
 public:
  explicit StoreFull(const std::string& message)
      : StoreError(message, ErrorCode::resource_exhausted) {}
};

// LMDB could not get the memory it needed (ENOMEM): the store could not be
// mapped, its map could not grow, or an allocation failed, most often because
// the process's address space is capped (RLIMIT_AS). Nothing of a failed
// write was kept.
class StoreOutOfMemory : public StoreError {
 public:
  explicit StoreOutOfMemory(const std::string& message)
      : StoreError(message, ErrorCode::resource_exhausted) {}
};

// The map had to change size, for a write that needs more room or to follow
// another process that wrote past this process's map, but transactions of
// this process stayed open (see "The map" above): Snapshots held by the calling
// thread (refused at once, since it would wait for itself), or other threads'
// transactions still open after StoreOptions::grow_wait. The message says which,
// and how many. Nothing of a failed write was kept, and no Snapshot was opened;
// end the Snapshots and retry.
class ResizeBlocked : public StoreError {
 public:
  using StoreError::StoreError;
};

// The store was written with a schema version this build does not read.
class SchemaVersionMismatch : public StoreError {
 public:
  SchemaVersionMismatch(const std::filesystem::path& path, std::uint32_t found);
  std::uint32_t found() const { return found_; }

 private:
  std::uint32_t found_;
};

struct StoreOptions {
  // LMDB maps the whole store into the address space. The map starts at
  // `initial_map_size` and doubles whenever a write runs out of room, up to
  // `max_map_size`. Changing it waits up to `grow_wait` for the open
  // Snapshots of other threads to end (see "The map" above).
  std::size_t initial_map_size = std::size_t{4} << 30;  // 4 GiB
  std::size_t max_map_size = std::size_t{1} << 40;      // 1 TiB
  std::chrono::milliseconds grow_wait{30'000};
  // Read transactions open at once, over every process of the store: the
  // size of LMDB's reader table, which its lock file holds and every open
  // that creates the store writes out.
  unsigned max_readers = 1024;
  // false trades durability on power loss for speed (MDB_NOSYNC); a process
  // crash still never loses a committed transaction.
  bool sync = true;
  // false flushes each commit's meta page with the next commit rather than
  // at once (MDB_NOMETASYNC): one disk flush per commit instead of two. A
  // power loss may then undo the last committed transaction, never the
  // store's integrity; a process crash still loses nothing committed.
  bool sync_meta = true;
  // true opens the store without LMDB's lock file and its locks
  // (MDB_NOLOCK), for a store one thread of this process uses alone, at
  // times another process may use it while this one has no transaction open:
  // the scratch store a trial's parent seeds, leaves to its child, and reads
  // back. Nothing of the lock file is read or written, so a child that
  // scribbles on it cannot stall or mislead the parent. A write then begins
  // only while no other transaction of this process is open (no Snapshot
  // held, no other write), since no reader table tells LMDB which pages an
  // older snapshot still reads; a write that begins otherwise is a bug and
  // throws std::logic_error.
  bool exclusive = false;
  // true stores each appended event deflated when that is smaller (raw
  // deflate with the store's dictionary of the runtime's event shapes,
  // docs/store-format.md "Deflated events"): a trial's fork of hundreds of
  // alike events then takes a fraction of its bytes, for 6 to 8 µs of CPU
  // an event (mostly zlib's set-up of each stream, whatever the event's
  // size). Only in a store of schema version 2; a version-1 store is
  // written as before. Reading needs no option: every value says its form.
  bool deflate_events = false;
  // The clock stamping created_at (ISO-8601 UTC) and the generator of new
  // run ids; tests inject fixed ones. Defaults: the system clock, and "run_"
  // plus 16 random hex digits. Both are called inside write transactions
  // (serialized), and new_run_id also from EventStore::new_run_id on any
  // thread, so a replacement must be thread-safe where that is used.
  std::function<std::string()> clock;
  std::function<RunId()> new_run_id;
  // Called in each write transaction just before it commits (not for the
  // store's own creation). It may throw StoreFull, which aborts the
  // transaction as a full disk would: the seam through which a simulated
  // world (base/world.h) fills the disk. Default: none.
  std::function<void()> before_commit;
};

// The canonical serialization of a run's history prefix (docs/store-format.md,
// "Segments"): the same events always give the same bytes.
inline constexpr std::string_view kSegmentMagic = "FTSEGMT1";

class Snapshot;

// What Writer::delete_runs removed.
struct DeletedRuns {
  std::uint64_t runs = 0;
  std::uint64_t events = 0;
  // Bytes of keys and values removed from the tables (runs, events, their
  // indexes): the room freed inside the store's file, which LMDB reuses but
  // never gives back to the disk.
  std::uint64_t bytes = 0;
};

// What Writer::delete_blobs removed, and what it kept of what it was asked
// to delete.
struct DeletedBlobs {
  std::uint64_t blobs = 0;
  std::uint64_t bytes = 0;           // the blobs' sizes: room freed inside the store's file
  std::uint64_t kept_recent = 0;     // stored or touched at or after the cutoff
  std::uint64_t kept_unstamped = 0;  // without a time (stored by an older build): stamped now
};

// A stored blob, as Snapshot::blobs lists it.
struct BlobInfo {
  Digest digest;
  std::uint64_t size = 0;
  // When it was last stored or touched (Writer::touch_blobs), as
  // StoreOptions::clock wrote it; nullopt for a blob an older build stored.
  std::optional<std::string> stored_at;
};

// The write side of one transaction, handed to the body of EventStore::write.
// Every call sees the writes made before it in the same transaction. A Writer
// is only valid inside that body.
class Writer {
 public:
  Result<RunInfo> create_run(const NewRun& run);
  // Records a fork of `parent` at `at_event` (which must be in the parent's
  // history) without copying anything.
  Result<RunInfo> fork(const RunId& parent, const EventId& at_event, const NewRun& fork);
  // Appends `events` after `expected_head`; returns the new head. Refused,
  // with nothing written, if the head moved or an event id is already in the
  // run's history or repeated in the batch. `deflate` false keeps them
  // plain in a deflating store too (StoreOptions::deflate_events): for
  // records written once per trial whose bytes matter less than the CPU.
  Result<std::uint64_t> append(const RunId& run, std::uint64_t expected_head,
                               std::span<const NewEvent> events, bool deflate = true);
  // Stores `bytes` under their SHA-256 digest (an existing blob is kept).
  // Every way of storing a blob (put_blob, put_blob_file, store_segment)
  // stamps it with the time (StoreOptions::clock), an existing blob too:
  // that time is what Writer::delete_blobs checks.
  Digest put_blob(std::span<const std::byte> bytes);
  // See EventStore::put_blob_file.
  Digest put_blob_file(const std::filesystem::path& file);
  // Stores the segment of `run`'s history up to `up_to_seq` as a blob without
  // building it in memory; returns its digest.
  Result<Digest> store_segment(const RunId& run, std::uint64_t up_to_seq);
  // Creates a root run holding exactly the events of a segment.
  Result<RunInfo> load_segment(std::span<const std::byte> segment, const NewRun& run);
  // Stamps the stored blobs among `digests` with the time, as storing them
  // again would, so a delete_blobs with an earlier cutoff keeps them: a
  // blob someone is about to use is touched first. Returns the digests that
  // are not stored, in the order given.
  std::vector<Digest> touch_blobs(std::span<const Digest> digests);
  // Deletes the blobs among `digests` last stored or touched before
  // `stored_before` (a time in the form parse_timestamp reads). A blob
  // stamped at or after it is kept; a blob without a time (stored by a build
  // before blob times) is stamped now and kept, so a later call may take it;
  // a digest not stored is ignored. Costs O(log n) per digest.
  DeletedBlobs delete_blobs(std::span<const Digest> digests, std::string_view stored_before);
  // Deletes the runs and their own events (and the events' id index), so
  // their ids may be taken again; blobs stay. Refused, with nothing deleted:
  // an unknown run, a run named twice, or a run another run forks from that
  // is not deleted with it (that fork's history would lose events). Costs
  // O(runs in the store) for the forks check, plus O(log n) per entry deleted.
  Result<DeletedRuns> delete_runs(std::span<const RunId> runs);
  // Reads of this transaction, own writes included, as Snapshot's. The
  // coordinator reconciles a report by appending a delta and recounting
  // events in one transaction.
  std::optional<RunInfo> run(const RunId& id) const;
  void for_each_event(const RunInfo& run, std::uint64_t from_seq,
                      const std::function<bool(const EventView&)>& visit) const;
  std::optional<Event> find_event(const RunInfo& run, const EventId& id) const;
  std::vector<Event> events_of_type(const RunInfo& run, std::string_view type,
                                    std::uint64_t after_seq = 0) const;

  struct State;
  explicit Writer(State& state) : state_(state) {}

 private:
  State& state_;
};

class EventStore {
 public:
  // Opens (creating if needed) the store in directory `path`.
  explicit EventStore(const std::filesystem::path& path, StoreOptions options = {});
  ~EventStore();
  EventStore(EventStore&&) noexcept;
  EventStore& operator=(EventStore&&) noexcept;
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;

  const std::filesystem::path& path() const;
  // Makes every committed transaction durable, the last one's meta page
  // included, whatever sync_meta says (see StoreOptions). Throws StoreError
  // when the disk refuses the flush.
  void sync();
  std::size_t map_size() const;
  // What this handle wrote: write transactions committed and forced flushes
  // (sync()) since it opened the store.
  struct WriteCounts {
    std::uint64_t commits = 0;
    std::uint64_t syncs = 0;
  };
  WriteCounts write_counts() const;
  // Writes a compacted copy of the store, without the room deleted runs
  // left, into the new directory `to` (created; refused with StoreError when
  // it exists): the way to give that room back to the disk, since LMDB's
  // file never shrinks. Writers wait for nothing: the copy reads a snapshot.
  void copy_compacted(const std::filesystem::path& to) const;

  // Runs `body` in one write transaction, committed when it returns a value
  // and aborted when it returns a Refusal or throws. When the map must grow
  // (or follow another process's), the transaction is aborted and `body` runs
  // again on the new map, so `body` must have no effects outside the Writer it
  // gets. The body holds LMDB's write lock: it must not call this EventStore
  // (write or snapshot) itself, and should not block on other threads that
  // might. Throws ResizeBlocked when the map cannot change (see "The map"
  // above), StoreFull when it may not grow further.
  template <typename Body>
  auto write(Body&& body) -> decltype(body(std::declval<Writer&>())) {
    std::optional<decltype(body(std::declval<Writer&>()))> result;
    write_transaction([&](Writer& writer) {
      result.emplace(body(writer));
      return result->has_value();
    });
    return std::move(*result);
  }

  // One-transaction shorthands for the Writer operations.
  Result<RunInfo> create_run(const NewRun& run);
  Result<RunInfo> fork(const RunId& parent, const EventId& at_event, const NewRun& fork);
  Result<std::uint64_t> append(const RunId& run, std::uint64_t expected_head,
                               std::span<const NewEvent> events);
  Result<std::uint64_t> append(const RunId& run, std::uint64_t expected_head,
                               const NewEvent& event);
  // Creates a run and appends `events` to it in one transaction: either the
  // whole run is stored or nothing is.
  Result<RunInfo> import_run(const NewRun& run, std::span<const NewEvent> events);
  Digest put_blob(std::span<const std::byte> bytes);
  // Streams a file into the blob table: it is read once to hash and once
  // straight into the reserved LMDB space, never held in memory. Throws
  // SystemError if the file cannot be read and StoreError if it changed while
  // being stored.
  Digest put_blob_file(const std::filesystem::path& file);
  // The inherited prefix of fork `run` (events up to its fork point), stored
  // as a blob. Refused for an unknown run or a run that is not a fork.
  Result<Digest> store_fork_segment(const RunId& run);
  Result<RunInfo> load_segment(std::span<const std::byte> segment, const NewRun& run);
  Result<DeletedRuns> delete_runs(std::span<const RunId> runs);
  std::vector<Digest> touch_blobs(std::span<const Digest> digests);
  DeletedBlobs delete_blobs(std::span<const Digest> digests, std::string_view stored_before);

  // A consistent read-only view of the store as of now. Throws ResizeBlocked
  // when another process wrote past this process's map and the map cannot
  // follow yet (see "The map" above).
  Snapshot snapshot() const;

  // A fresh run id from StoreOptions::new_run_id, for a caller that must name
  // a run before it creates it (e.g. a trial whose fork is recorded together
  // with its result).
  RunId new_run_id() const;

  struct Impl;

 private:
  void write_transaction(const std::function<bool(Writer&)>& body);
  std::unique_ptr<Impl> impl_;
};

// A read transaction. Everything it returns by view or span points into the
// store's memory map and stays valid until the Snapshot is destroyed. Each call
// makes the calling thread the Snapshot's holder (see "The map" above).
class Snapshot {
 public:
  ~Snapshot();
  Snapshot(Snapshot&&) noexcept;
  Snapshot& operator=(Snapshot&&) noexcept;
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  std::optional<RunInfo> run(const RunId& id) const;
  // Every run, oldest first.
  std::vector<RunInfo> runs() const;

  // The run's history from `from_seq` on, oldest first, walking its lineage:
  // inherited events up to the fork point, then its own. `visit` returns
  // false to stop early.
  void for_each_event(const RunInfo& run, std::uint64_t from_seq,
                      const std::function<bool(const EventView&)>& visit) const;
  std::vector<Event> history(const RunInfo& run, std::uint64_t from_seq = 1) const;
  // The number of events in the run's history (its head).
  std::uint64_t count(const RunInfo& run) const;
  std::optional<Event> find_event(const RunInfo& run, const EventId& id) const;
  // The events of type `type` in the run's history with seq > after_seq,
  // oldest first.
  std::vector<Event> events_of_type(const RunInfo& run, std::string_view type,
                                    std::uint64_t after_seq = 0) const;

  // Streams the segment of the run's history up to `up_to_seq` into `sink`,
  // chunk by chunk.
  void write_segment(const RunInfo& run, std::uint64_t up_to_seq,
                     const std::function<void(std::span<const std::byte>)>& sink) const;
  std::vector<std::byte> segment(const RunInfo& run, std::uint64_t up_to_seq) const;

  std::optional<std::span<const std::byte>> blob(const Digest& digest) const;
  bool has_blob(const Digest& digest) const;
  // The digests among `digests` that are not stored, in the order given.
  std::vector<Digest> missing_blobs(std::span<const Digest> digests) const;
  // Every stored blob, in digest order, with its size and time.
  std::vector<BlobInfo> blobs() const;

  struct State;
  explicit Snapshot(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// Reads the events of a segment (as EventStore::segment writes one) in
// order, checking every byte as load_segment does, and calls `visit` with
// each until it returns false. Returns how many were visited; refused with
// invalid_segment naming what is wrong, after visiting the events before it.
Result<std::uint64_t> for_each_segment_event(std::span<const std::byte> segment,
                                             const std::function<bool(const EventView&)>& visit);

}  // namespace forktrial::store
