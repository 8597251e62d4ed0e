// The orchestration log: the store run that holds the coordinator's
// orchestration records (coordinator/orchestration.h) as events, the codec
// between a record and its event, and the helpers that append to the log and
// read it back for Scheduler::replay. The event format, field by field, is
// docs/orchestration-log.md.
//
// A record is stored as one event (but for a large job, below): its type is
// the record's kType, its
// payload a JSON object holding every field of the record, exactly (a
// decoded record compares equal to the one encoded), its timestamp the
// record's `at` and its actor kCoordinatorActor. The payload is the truth;
// the timestamp is for people and tools reading the run, and is clamped to
// the years 0001..9999 that ISO-8601 text can show.
//
// Text of a record (ids, names, reasons, trial payloads) may come from peers
// and need not be valid UTF-8, which JSON text cannot hold: such a value is
// stored as {"hex": "<its bytes in lowercase hex>"} instead of a string, so
// every record encodes, and decodes to the same bytes.
//
// A job.submitted record whose trials pass kJobChunkBytes of text is stored
// as a job.submitted event holding the first trials and "trial_count", then
// job.trials events holding the rest in order, all appended together (one
// transaction): no event, and no JSON tree read back, grows with the job.
// read_log joins them into the one record again.
//
// A reconciled attempt is one trial.settled event: its trial.reconciled
// record, the coordinator's verdict, and usually its trial.reported record.
//
// The log also holds events of the coordinator's own that are not records
// (in logs written before trial.settled, "trial.verdict" events, written in
// the same transaction as a trial.reconciled); read_log hands those over
// untouched.
//
// Thread-safety: the functions are pure apart from the Writer or Snapshot
// they are given, and follow that object's rules (store/event_store.h).
//
// Errors: record_of and read_log return a message naming the event (id and
// type) and the field when an event of a record type is not one this build
// writes; append_to_log returns the store's Refusal; nothing here throws
// apart from the store's own StoreError family and std::bad_alloc.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "base/error.h"
#include "coordinator/orchestration.h"
#include "store/event.h"
#include "store/event_store.h"
#include "store/ids.h"

namespace forktrial::coordinator {

// The run that holds the log, created on first use (label "orchestration log").
inline const store::RunId kOrchestrationRun{"forktrial.orchestration"};
inline constexpr std::string_view kOrchestrationRunLabel = "orchestration log";
// The actor of every record event.
inline constexpr std::string_view kCoordinatorActor = "forktrial.coordinator";

// The type of the events that continue a large job.submitted record.
inline constexpr std::string_view kJobTrialsType = "job.trials";
// The type of an event holding consecutive trial.leased records of one worker
// with one expiry and time (a worker's offer answered), up to kLeasesPerEvent:
// each a record, in order, as read_log hands them over.
inline constexpr std::string_view kLeasesType = "trials.leased";
inline constexpr std::size_t kLeasesPerEvent = 4096;
// The type of an event holding a trial.reconciled record with the
// coordinator's verdict on the attempt (Verdict), and, folded in, the
// attempt's trial.reported record when the same append holds it
// (append_to_log): what used to be three events of a reconciled trial.
inline constexpr std::string_view kSettledType = "trial.settled";
// About the most trial text one event of a job holds (a chunk ends with the
// first trial that reaches it; a chunk holds at least one trial).
inline constexpr std::size_t kJobChunkBytes = std::size_t{16} << 20;

// A reconciled attempt's verdict: the coordinator's own JSON object (what the
// store and the worker established), written in the event of the attempt's
// trial.reconciled record.
struct Verdict {
  TrialId trial;
  Attempt attempt = 0;
  WorkerId worker;        // the one that reported it
  std::string payload;    // a JSON object
  std::uint64_t seq = 0;  // set by append_to_log: the event that holds it
};

// The event `record` is stored as, with id numbered_event_id(event_number),
// as one event whatever its size (append_to_log cuts a large job).
store::NewEvent to_event(const OrchestrationRecord& record, std::uint64_t event_number);

// The record `event` holds. An error, naming the event's id and type and the
// field at fault, when the type is not a record type or the payload is not
// what to_event writes for it: not JSON, not an object, a field missing,
// unknown or of the wrong type, a number out of the field's range, a digest
// or outcome name that is not one, a bad hex text. The event's timestamp and
// actor are not read.
std::expected<OrchestrationRecord, Status> record_of(const store::EventView& event);

// Whether `type` is the kType of one of the records (other events in the log
// are the coordinator's own and are not records).
bool is_record_type(std::string_view type);

// In the caller's write transaction: creates the log's run if it is missing,
// then appends `records` (in order) followed by `extra` (the caller's own
// events, typed: their id is replaced, every other field is kept), numbering
// event ids on from the log's head (numbered_event_id(head + 1), ...). Returns
// the new head. A job.submitted whose trials pass `job_chunk_bytes` becomes
// several events (above), each written to the store as it is made. Refused
// by the store (the caller's body should return the refusal so that the
// transaction aborts) for an extra event breaking the store's rules, or an
// event id already in the log (a log that something else appended to with
// its own numbering).
store::Result<std::uint64_t> append_to_log(store::Writer& writer,
                                           std::span<const OrchestrationRecord> records,
                                           std::span<const store::NewEvent> extra = {},
                                           std::size_t job_chunk_bytes = kJobChunkBytes,
                                           std::span<Verdict> verdicts = {});

// Reads the whole log in order: each record to `on_record` (to keep: it is
// not read again), every other event
// to `on_other` (its views valid during the call only); a job cut into
// events is handed over once, whole. A trial.settled event's records go to
// `on_record` (its trial.reported, if folded in, then its trial.reconciled),
// then the event itself to `on_other`, for its verdict. A store without the log's run is an
// empty log. A record event that does not decode, or a job's events that do
// not follow each other and add up to its trial count, mean the log is
// corrupt: reading stops there and the error is returned, the events
// before it having been handed over. Exceptions thrown by the callbacks (a
// Scheduler::replay that finds the state disagreeing) propagate.
std::expected<void, Status> read_log(const store::Snapshot& snapshot,
                                     const std::function<void(OrchestrationRecord&&)>& on_record,
                                     const std::function<void(const store::EventView&)>& on_other);

// ---- Records that do not apply
//
// A record that does not apply to the state the records before it built
// (RecordDoesNotApply: two coordinators once wrote one store's log, or a
// bug) must not make the store refuse every start. replay_setting_aside
// reads the log as read_log does; when `on_record` throws RecordDoesNotApply,
// that record is set aside: `restart` is called (the caller discards all it
// built from the log), and the log is read again from its start without any
// record set aside so far. `restart` is also called before the first read.
// Each record set aside costs one more read of the log.

// A record set aside: its place among the log's records in read order (from
// 0), its type and why it did not apply.
struct SetAside {
  std::uint64_t ordinal = 0;
  std::string type;
  std::string why;
};
// "record 41 (trial.leased): job_... is not queued".
std::string describe(const SetAside& record);

struct Replayed {
  std::uint64_t records = 0;  // handed to on_record and applied
  std::vector<SetAside> set_aside;
};

// More records than this that do not apply mean a log beyond setting aside.
inline constexpr std::size_t kMaxSetAside = 64;

// Errors: read_log's; failed_precondition, naming the first records set
// aside, when more than `max_set_aside` do not apply. Exceptions of the
// callbacks other than RecordDoesNotApply propagate.
std::expected<Replayed, Status> replay_setting_aside(
    const store::Snapshot& snapshot, const std::function<void()>& restart,
    const std::function<void(OrchestrationRecord&&)>& on_record,
    const std::function<void(const store::EventView&)>& on_other,
    std::size_t max_set_aside = kMaxSetAside);

// ---- Compaction
//
// The log is compacted by replacing it, in one write transaction, with a
// snapshot of the state it rebuilds (Scheduler::snapshot): the run is
// deleted and created again holding the snapshot's records, the caller's
// events that must outlive the records they came with (the verdicts of
// reconciled trials not yet archived), and a log.snapshot event that ends
// the snapshot. Records appended after it follow as before. A crash or a
// refusal at any point leaves the log as it was before or after, whole, as
// LMDB commits a transaction whole or not at all.

// The type of the event that ends a snapshot: payload {"generation": n,
// "replaced_events": the head of the log it replaced, "at": instant}.
inline constexpr std::string_view kSnapshotType = "log.snapshot";

struct LogSnapshot {
  std::uint64_t generation = 0;       // 1 for the first compaction of a log, and on
  std::uint64_t replaced_events = 0;  // the events of the log the snapshot replaced
  std::uint64_t seq = 0;              // its event's place: the snapshot's events, itself included
  friend bool operator==(const LogSnapshot&, const LogSnapshot&) = default;
};

// The snapshot a log.snapshot event ends; none for another event or one
// whose payload is not what compact_log writes.
std::optional<LogSnapshot> log_snapshot_of(const store::EventView& event);

// In the caller's write transaction: replaces the log (run
// kOrchestrationRun, created when missing) by `snapshot`'s records, then
// `extra` (as append_to_log takes them), then the log.snapshot event of
// generation `generation` stamped `at`. Returns where it lands (its seq is
// the new log's head). Refused by the store as append_to_log is, or when a
// run forks from the log; the caller's body should then return the refusal,
// so that the transaction aborts and the old log stays.
store::Result<LogSnapshot> compact_log(store::Writer& writer,
                                       std::span<const OrchestrationRecord> snapshot,
                                       std::span<const store::NewEvent> extra,
                                       std::uint64_t generation, Instant at,
                                       std::size_t job_chunk_bytes = kJobChunkBytes);

// ---- A finished job's archive
//
// Once a job has finished, the coordinator writes its trials to a run of
// their own, archive_run_of(job), one trial.archived event per trial in index
// order (trial i is event i + 1, id numbered_event_id(i + 1)), over as many
// transactions as it takes, then a job.archived record to the log. The
// scheduler then forgets the job's trials, and results, rankings and gc
// read them from the archive. An archived trial holds all its result line is
// made of (its specification, its state and its verdict), so the archive
// does not depend on the log's other events.

inline constexpr std::string_view kArchivedTrialType = "trial.archived";

// "forktrial.archive.<job>".
store::RunId archive_run_of(const JobId& job);

struct ArchivedTrial {
  std::uint32_t index = 0;
  TrialStatus status = TrialStatus::reconciled;  // final: reconciled, cancelled or abandoned
  Attempt attempt = 0;                           // its last attempt
  WorkerId worker;                               // the holder of its last lease; "" none
  std::vector<std::string> reasons;              // of each failed attempt, the first's first
  TrialInput input;                              // as submitted
  // The earlier trial of the archive whose input this one's is (a matrix's
  // repeats): its event holds `input`, this one's does not. Reading fills
  // `input` in all the same.
  std::optional<std::uint32_t> input_of;
  std::optional<Outcome> outcome;  // when reconciled, and only then
  // When reconciled: its stored result, a JSON object: the verdict (a
  // trial.settled's, or a trial.verdict payload, whose attempt, worker and
  // outcome are not read: the archived trial's own are), or with `line`,
  // the whole result line that logs written before verdicts hold.
  std::string result;
  bool line = false;
  friend bool operator==(const ArchivedTrial&, const ArchivedTrial&) = default;
};

// The trial's event in its job's archive, stamped `at`, without an actor.
// Fields: `index`,
// `status`, `attempt`, `worker`? (absent: none), `reasons`? (absent: none),
// `outcome`? (reconciled only), `input` (as a job.submitted's trial) or
// `input_of` (the index of an earlier trial holding it), then `verdict`? or
// `line`? (reconciled only).
store::NewEvent archived_trial_event(const ArchivedTrial& trial, Instant at);

// The trial a trial.archived event holds (with `input_of`, `input` is left
// empty: the readers below fill it in); an error naming the event and the
// field when it is not what archived_trial_event writes.
std::expected<ArchivedTrial, Status> archived_trial_of(const store::EventView& event);

// The archived trial, read in `snapshot`: none when its job's archive does
// not hold it; an error when its event does not decode or is another
// trial's.
std::expected<std::optional<ArchivedTrial>, Status> read_archived_trial(
    const store::Snapshot& snapshot, const TrialId& trial);

// Every trial of the job's archive to `visit`, in index order (an archive
// not written: none). Stops at the first event that does not decode or is
// out of order, and returns its error.
std::expected<void, Status> visit_archive(const store::Snapshot& snapshot, const JobId& job,
                                          const std::function<void(ArchivedTrial&&)>& visit);

}  // namespace forktrial::coordinator
