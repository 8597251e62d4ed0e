#include "store/event_store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "base/timestamp.h"
#include "store/blob.h"
#include "store/codec.h"
#include "store/environment.h"
#include "store/lmdb.h"
#include "store/reader.h"
#include "store/segment.h"

namespace forktrial::store {
namespace {

Refusal refuse(Refused kind, std::string message) {
  return Refusal{kind, std::move(message)};
}

codec::RunRecord as_record(const RunInfo& run) {
  return codec::RunRecord{run.id,   run.label,    run.created_at, run.number, run.fork_of,
                          run.goal, run.frame_id, run.owner,      run.source};
}

}  // namespace

ErrorCode Refusal::code_of(Refused kind) {
  switch (kind) {
    case Refused::unknown_run:
    case Refused::unknown_event:
      return ErrorCode::not_found;
    case Refused::run_exists:
    case Refused::head_moved:
    case Refused::duplicate_event_id:
      return ErrorCode::conflict;
    case Refused::invalid_event:
    case Refused::invalid_segment:
    case Refused::invalid_input:
      return ErrorCode::invalid_argument;
  }
  return ErrorCode::internal;
}

// EventStore's state is its environment (store/environment.h): Writer and
// Snapshot reach the tables through the transactions it begins.
struct EventStore::Impl : Environment {
  using Environment::Environment;
};

struct Writer::State {
  Environment& env;
  lmdb::Txn& txn;
  TxnReader reader() const { return TxnReader(env.dbis(), txn.get()); }
};

struct Snapshot::State {
  const Environment* env = nullptr;
  ReadTxn read;

  // Every use makes the calling thread the snapshot's holder (store/txn_gate.h).
  MDB_txn* use() {
    read.ticket.hold_here();
    return read.txn.get();
  }
  TxnReader reader() { return TxnReader(env->dbis(), use()); }
};

namespace {

MDB_val blob_key(const Digest& digest) {
  return lmdb::val(std::as_bytes(std::span(digest.bytes())));
}

// Records `digest` as stored or needed now (docs/store-format.md, "blob_times").
Digest stamp_blob(Writer::State& state, const Digest& digest) {
  const std::string now = state.env.options().clock();
  state.txn.put(state.env.dbis().blob_times, blob_key(digest), lmdb::val(now));
  return digest;
}

}  // namespace

EventStore::EventStore(const std::filesystem::path& path, StoreOptions options)
    : impl_(std::make_unique<Impl>(path, std::move(options))) {}

EventStore::~EventStore() = default;
EventStore::EventStore(EventStore&&) noexcept = default;
EventStore& EventStore::operator=(EventStore&&) noexcept = default;

const std::filesystem::path& EventStore::path() const {
  return impl_->path();
}

void EventStore::sync() {
  impl_->sync();
}

std::size_t EventStore::map_size() const {
  return impl_->map_size();
}

EventStore::WriteCounts EventStore::write_counts() const {
  return {impl_->commits(), impl_->syncs()};
}

void EventStore::copy_compacted(const std::filesystem::path& to) const {
  std::error_code error;
  if (std::filesystem::exists(to, error) || error) {
    throw StoreError("cannot copy the store to " + to.string() +
                     ": it exists; give a new directory");
  }
  if (!std::filesystem::create_directories(to, error) || error) {
    throw StoreError("cannot create " + to.string() + ": " + error.message());
  }
  impl_->copy_compacted(to);
}

void EventStore::write_transaction(const std::function<bool(Writer&)>& body) {
  impl_->write([&](lmdb::Txn& txn) {
    Writer::State state{*impl_, txn};
    Writer writer(state);
    return body(writer);
  });
}

RunId EventStore::new_run_id() const {
  return impl_->options().new_run_id();
}

Snapshot EventStore::snapshot() const {
  auto state = std::make_unique<Snapshot::State>();
  state->env = impl_.get();
  state->read = impl_->read();
  return Snapshot(std::move(state));
}

Result<RunInfo> EventStore::create_run(const NewRun& run) {
  return write([&](Writer& w) { return w.create_run(run); });
}

Result<RunInfo> EventStore::fork(const RunId& parent, const EventId& at_event, const NewRun& fork) {
  return write([&](Writer& w) { return w.fork(parent, at_event, fork); });
}

Result<std::uint64_t> EventStore::append(const RunId& run, std::uint64_t expected_head,
                                         std::span<const NewEvent> events) {
  return write([&](Writer& w) { return w.append(run, expected_head, events); });
}

Result<std::uint64_t> EventStore::append(const RunId& run, std::uint64_t expected_head,
                                         const NewEvent& event) {
  return append(run, expected_head, std::span<const NewEvent>(&event, 1));
}

Result<RunInfo> EventStore::import_run(const NewRun& run, std::span<const NewEvent> events) {
  return write([&](Writer& w) -> Result<RunInfo> {
    auto created = w.create_run(run);
    if (!created) return created;
    auto head = w.append(created->id, 0, events);
    if (!head) return std::unexpected(head.error());
    created->head = *head;
    return created;
  });
}

Digest EventStore::put_blob(std::span<const std::byte> bytes) {
  return *write([&](Writer& w) -> Result<Digest> { return w.put_blob(bytes); });
}

Digest EventStore::put_blob_file(const std::filesystem::path& file) {
  return *write([&](Writer& w) -> Result<Digest> { return w.put_blob_file(file); });
}

Result<Digest> EventStore::store_fork_segment(const RunId& run) {
  return write([&](Writer& w) -> Result<Digest> {
    auto info = w.run(run);
    if (!info) return std::unexpected(refuse(Refused::unknown_run, "no run " + run.str()));
    if (!info->fork_of) {
      return std::unexpected(refuse(Refused::invalid_input,
                                    "run " + run.str() + " is not a fork; it inherits nothing"));
    }
    return w.store_segment(run, info->fork_of->seq);
  });
}

Result<RunInfo> EventStore::load_segment(std::span<const std::byte> segment, const NewRun& run) {
  return write([&](Writer& w) { return w.load_segment(segment, run); });
}

Result<DeletedRuns> EventStore::delete_runs(std::span<const RunId> runs) {
  return write([&](Writer& w) { return w.delete_runs(runs); });
}

std::vector<Digest> EventStore::touch_blobs(std::span<const Digest> digests) {
  return *write([&](Writer& w) -> Result<std::vector<Digest>> { return w.touch_blobs(digests); });
}

DeletedBlobs EventStore::delete_blobs(std::span<const Digest> digests,
                                      std::string_view stored_before) {
  return *write(
      [&](Writer& w) -> Result<DeletedBlobs> { return w.delete_blobs(digests, stored_before); });
}

// ---- Writer ----

std::optional<RunInfo> Writer::run(const RunId& id) const {
  auto reader = state_.reader();
  auto record = reader.record(id);
  if (!record) return std::nullopt;
  return reader.info(*record);
}

void Writer::for_each_event(const RunInfo& run, std::uint64_t from_seq,
                            const std::function<bool(const EventView&)>& visit) const {
  state_.reader().visit(as_record(run), from_seq, visit);
}

std::optional<Event> Writer::find_event(const RunInfo& run, const EventId& id) const {
  return state_.reader().find_event(as_record(run), id.str());
}

std::vector<Event> Writer::events_of_type(const RunInfo& run, std::string_view type,
                                          std::uint64_t after_seq) const {
  return state_.reader().events_of_type(as_record(run), type, after_seq);
}

namespace {

Result<codec::RunRecord> insert_run(const Environment& env, lmdb::Txn& txn, const NewRun& run,
                                    std::optional<ForkPoint> fork_of) {
  if (auto problem = run_text_problem(run)) {
    return std::unexpected(refuse(Refused::invalid_input, problem->message));
  }
  TxnReader reader(env.dbis(), txn.get());
  codec::RunRecord record;
  record.id = run.id ? *run.id : env.options().new_run_id();
  // A generated id that happens to be taken is drawn again; a given one is
  // the caller's to change.
  for (int draw = 0; !run.id && draw < 8 && reader.record(record.id); ++draw) {
    record.id = env.options().new_run_id();
  }
  // A generated id follows the rule too: StoreOptions::new_run_id is injected.
  if (auto problem = run_text_problem(NewRun{.id = record.id})) {
    return std::unexpected(refuse(Refused::invalid_input, problem->message));
  }
  if (reader.record(record.id)) {
    return std::unexpected(
        refuse(Refused::run_exists, "a run with id " + record.id.str() + " is already stored"));
  }
  record.label = run.label;
  record.created_at = run.created_at ? *run.created_at : env.options().clock();
  record.fork_of = std::move(fork_of);
  record.goal = run.goal;
  record.frame_id = run.frame_id;
  record.owner = run.owner;
  record.source = run.source;

  lmdb::Cursor numbers(txn.get(), env.dbis().run_numbers);
  MDB_val key{};
  MDB_val value{};
  record.number = numbers.get(key, value, MDB_LAST)
                      ? codec::get_u64(static_cast<const std::byte*>(key.mv_data)) + 1
                      : 1;
  auto number_key = codec::u64_key(record.number);
  txn.put(env.dbis().run_numbers, lmdb::val(std::span<const std::byte>(number_key)),
          lmdb::val(record.id.str()));
  auto encoded = codec::encode_run(record);
  txn.put(env.dbis().runs, lmdb::val(record.id.str()),
          lmdb::val(std::as_bytes(std::span(encoded.begin(), encoded.size()))));
  return record;
}

// Places the values of one batch of events of one run in the events table.
// When the batch's keys sort after every key in the table (appending to the
// newest run, the common case), it uses MDB_APPEND, which skips the B-tree
// search and fills pages completely instead of splitting them in half.
class EventSink {
 public:
  // `deflate`: store each event deflated when that is smaller (a store of
  // schema version 2 with StoreOptions::deflate_events).
  EventSink(const Dbis& dbis, lmdb::Txn& txn, std::uint64_t number, std::uint64_t first_seq,
            bool deflate)
      : cursor_(txn.get(), dbis.events), number_(number), deflate_(deflate) {
    auto first = codec::event_key(number, first_seq);
    MDB_val key{};
    MDB_val value{};
    append_ = !cursor_.get(key, value, MDB_LAST) ||
              std::memcmp(key.mv_data, first.data(), std::min<std::size_t>(key.mv_size, 16)) < 0;
  }

  // Stores the event at `seq` whose canonical encoding of `size` bytes
  // `fill` writes: in place, or, deflating, into a buffer first.
  template <typename Fill>
  void put(std::uint64_t seq, std::size_t size, Fill&& fill) {
    if (!deflate_) {
      fill(reserve(seq, size));
      return;
    }
    canonical_.resize(size);
    fill(std::span<std::byte>(canonical_));
    const bool smaller = codec::deflate_event(canonical_, deflated_);
    const std::vector<std::byte>& value = smaller ? deflated_ : canonical_;
    std::memcpy(reserve(seq, value.size()).data(), value.data(), value.size());
  }

 private:
  std::span<std::byte> reserve(std::uint64_t seq, std::size_t size) {
    auto key = codec::event_key(number_, seq);
    return cursor_.reserve(lmdb::val(std::span<const std::byte>(key)), size,
                           append_ ? MDB_APPEND : 0);
  }

  lmdb::Cursor cursor_;
  std::uint64_t number_;
  bool append_ = false;
  bool deflate_ = false;
  std::vector<std::byte> canonical_;
  std::vector<std::byte> deflated_;
};

// Adds entries to the event-id index. It remembers the largest key of the
// table: a key beyond it is put with MDB_APPEND (no search, full pages),
// which is every key of a run whose ids come from a counter (see
// codec::event_id_key); any other key takes a regular MDB_NOOVERWRITE put.
class IdIndexSink {
 public:
  IdIndexSink(const Dbis& dbis, lmdb::Txn& txn)
      : txn_(txn), dbi_(dbis.event_ids), cursor_(txn.get(), dbis.event_ids) {
    MDB_val key{};
    MDB_val value{};
    if (cursor_.get(key, value, MDB_LAST)) {
      last_.assign(static_cast<const std::byte*>(key.mv_data),
                   static_cast<const std::byte*>(key.mv_data) + key.mv_size);
    }
  }

  // Returns false, writing nothing, when the key is already indexed.
  bool put_new(MDB_val key, MDB_val value) {
    std::span<const std::byte> k(static_cast<const std::byte*>(key.mv_data), key.mv_size);
    if (std::lexicographical_compare(last_.begin(), last_.end(), k.begin(), k.end())) {
      cursor_.put(key, value, MDB_APPEND);
      last_.assign(k.begin(), k.end());
      return true;
    }
    return txn_.put_new(dbi_, key, value);
  }

 private:
  lmdb::Txn& txn_;
  MDB_dbi dbi_;
  lmdb::Cursor cursor_;
  std::vector<std::byte> last_;  // the largest key in the table
};

// Stores one event of run `number` at `seq` and indexes its id; refuses an
// id already in the history (`inherited` are the ancestors' parts). The
// value's `size` bytes are reserved in LMDB and filled by `fill`, so the
// encoding is written once, in place.
template <typename Fill>
std::optional<Refusal> put_event(const Dbis& dbis, lmdb::Txn& txn, EventSink& sink,
                                 IdIndexSink& ids, const RunId& run, std::uint64_t number,
                                 const std::vector<Range>& inherited, std::string_view id,
                                 std::uint64_t seq, std::size_t size, Fill&& fill) {
  auto duplicate = [&](std::uint64_t at) {
    return refuse(Refused::duplicate_event_id,
                  "event id " + std::string(id) + " is already in the history of run " + run.str() +
                      " (at seq " + std::to_string(at) + "); nothing was written");
  };
  if (!inherited.empty()) {
    if (auto at = TxnReader(dbis, txn.get()).find_seq(inherited, id)) return duplicate(*at);
  }
  std::byte id_key[codec::kMaxEventIdKeyBytes];
  MDB_val id_val{codec::event_id_key(number, id, id_key), id_key};
  auto seq_value = codec::u64_key(seq);
  if (!ids.put_new(id_val, lmdb::val(std::span<const std::byte>(seq_value)))) {
    auto existing = txn.get(dbis.event_ids, id_val);
    return duplicate(codec::get_u64(static_cast<const std::byte*>(existing->mv_data)));
  }
  sink.put(seq, size, fill);
  return std::nullopt;
}

}  // namespace

Result<RunInfo> Writer::create_run(const NewRun& run) {
  auto record = insert_run(state_.env, state_.txn, run, std::nullopt);
  if (!record) return std::unexpected(record.error());
  return state_.reader().info(*record);
}

Result<RunInfo> Writer::fork(const RunId& parent, const EventId& at_event, const NewRun& fork) {
  auto reader = state_.reader();
  auto parent_record = reader.record(parent);
  if (!parent_record) {
    return std::unexpected(refuse(
        Refused::unknown_run, "cannot fork run " + parent.str() + ": no such run in the store"));
  }
  auto seq = reader.find_seq(reader.lineage(*parent_record), at_event.str());
  if (!seq) {
    return std::unexpected(
        refuse(Refused::unknown_event, "cannot fork run " + parent.str() + " at event " +
                                           at_event.str() + ": the run's history (" +
                                           std::to_string(reader.head(*parent_record)) +
                                           " events) has no event with that id"));
  }
  auto record = insert_run(state_.env, state_.txn, fork, ForkPoint{parent, at_event, *seq});
  if (!record) return std::unexpected(record.error());
  return reader.info(*record);
}

Result<std::uint64_t> Writer::append(const RunId& run, std::uint64_t expected_head,
                                     std::span<const NewEvent> events, bool deflate) {
  auto reader = state_.reader();
  auto record = reader.record(run);
  if (!record) {
    return std::unexpected(
        refuse(Refused::unknown_run, "cannot append to run " + run.str() + ": no such run"));
  }
  std::uint64_t head = reader.head(*record);
  if (head != expected_head) {
    return std::unexpected(refuse(Refused::head_moved,
                                  "append to run " + run.str() + " expected head " +
                                      std::to_string(expected_head) + " but the head is " +
                                      std::to_string(head) +
                                      "; another writer moved it; nothing was written; re-read the "
                                      "run and retry from its head"));
  }
  auto inherited = reader.inherited(*record);
  std::uint64_t seq = head;
  EventSink sink(state_.env.dbis(), state_.txn, record->number, head + 1,
                 deflate && state_.env.deflates_events());
  IdIndexSink ids(state_.env.dbis(), state_.txn);
  for (const NewEvent& event : events) {
    if (auto problem = event_problem(event)) {
      return std::unexpected(
          refuse(Refused::invalid_event,
                 "cannot append to run " + run.str() + ": " + *problem + "; nothing was written"));
    }
    ++seq;
    if (auto refusal =
            put_event(state_.env.dbis(), state_.txn, sink, ids, run, record->number, inherited,
                      event.id.str(), seq, codec::encoded_event_size(event, seq),
                      [&](std::span<std::byte> out) { codec::encode_event(event, seq, out); })) {
      return std::unexpected(*refusal);
    }
  }
  return seq;
}

Digest Writer::put_blob(std::span<const std::byte> bytes) {
  return stamp_blob(state_, blob::put(state_.txn, state_.env.dbis().blobs, bytes));
}

Digest Writer::put_blob_file(const std::filesystem::path& file) {
  return stamp_blob(state_, blob::put_file(state_.txn, state_.env.dbis().blobs, file));
}

Result<Digest> Writer::store_segment(const RunId& run, std::uint64_t up_to_seq) {
  auto reader = state_.reader();
  auto record = reader.record(run);
  if (!record) {
    return std::unexpected(refuse(Refused::unknown_run, "no run " + run.str() + " in the store"));
  }
  std::uint64_t head = reader.head(*record);
  if (up_to_seq > head) {
    return std::unexpected(refuse(
        Refused::unknown_event, "run " + run.str() + " has " + std::to_string(head) +
                                    " events; no segment up to seq " + std::to_string(up_to_seq)));
  }
  // Streamed twice (hashed, then copied into the reserved blob): the segment
  // is never built in memory, whatever the length of the prefix.
  return stamp_blob(
      state_, blob::put_produced(state_.txn, state_.env.dbis().blobs,
                                 "the segment of run " + run.str(), [&](const blob::Sink& sink) {
                                   reader.stream_segment(*record, up_to_seq, sink);
                                 }));
}

std::vector<Digest> Writer::touch_blobs(std::span<const Digest> digests) {
  std::vector<Digest> missing;
  for (const Digest& digest : digests) {
    if (blob::get(state_.txn.get(), state_.env.dbis().blobs, digest)) {
      stamp_blob(state_, digest);
    } else {
      missing.push_back(digest);
    }
  }
  return missing;
}

DeletedBlobs Writer::delete_blobs(std::span<const Digest> digests, std::string_view stored_before) {
  const auto cutoff = parse_timestamp(stored_before);
  if (!cutoff) {
    throw std::invalid_argument("delete_blobs: " + cutoff.error().message);
  }
  const Dbis& dbis = state_.env.dbis();
  DeletedBlobs deleted;
  for (const Digest& digest : digests) {
    auto bytes = blob::get(state_.txn.get(), dbis.blobs, digest);
    if (!bytes) continue;
    const auto stamp = state_.txn.get(dbis.blob_times, blob_key(digest));
    std::optional<UnixMillis> at;
    if (stamp) {
      if (auto parsed = parse_timestamp(lmdb::chars(*stamp))) at = *parsed;
    }
    if (!at) {
      // Stored before blobs had times (or stamped unreadably): its age is
      // unknown, so it counts as stored now.
      ++deleted.kept_unstamped;
      stamp_blob(state_, digest);
      continue;
    }
    if (*at >= *cutoff) {
      ++deleted.kept_recent;
      continue;
    }
    deleted.bytes += bytes->size();
    ++deleted.blobs;
    state_.txn.del(dbis.blobs, blob_key(digest));
    state_.txn.del(dbis.blob_times, blob_key(digest));
  }
  return deleted;
}

Result<std::uint64_t> for_each_segment_event(std::span<const std::byte> segment,
                                             const std::function<bool(const EventView&)>& visit) {
  auto bad = [](const std::string& why) {
    return std::unexpected(refuse(Refused::invalid_segment, "invalid segment: " + why));
  };
  auto events = SegmentReader::open(segment);
  if (!events) return bad(events.error().message);
  std::uint64_t visited = 0;
  for (;;) {
    auto next = events->next();
    if (!next) return bad(next.error().message);
    if (!*next) return visited;
    ++visited;
    if (!visit((*next)->view)) return visited;
  }
}

Result<RunInfo> Writer::load_segment(std::span<const std::byte> segment, const NewRun& run) {
  auto bad = [](const std::string& why) {
    return std::unexpected(refuse(Refused::invalid_segment, "invalid segment: " + why));
  };
  auto events = SegmentReader::open(segment);
  if (!events) return bad(events.error().message);
  auto record = insert_run(state_.env, state_.txn, run, std::nullopt);
  if (!record) return std::unexpected(record.error());
  EventSink sink(state_.env.dbis(), state_.txn, record->number, 1, state_.env.deflates_events());
  IdIndexSink ids(state_.env.dbis(), state_.txn);
  for (;;) {
    auto next = events->next();
    if (!next) return bad(next.error().message);
    if (!*next) break;
    const SegmentEvent& event = **next;
    auto copy = [&](std::span<std::byte> out) {
      std::memcpy(out.data(), event.value.data(), event.value.size());
    };
    if (auto refusal =
            put_event(state_.env.dbis(), state_.txn, sink, ids, record->id, record->number, {},
                      event.view.id, event.seq, event.value.size(), copy)) {
      return bad(refusal->message);
    }
  }
  return state_.reader().info(*record);
}

namespace {

// Deletes every key of `dbi` that starts with the 8-byte run number `number`;
// adds what it removed to `deleted`.
std::uint64_t delete_numbered(lmdb::Txn& txn, MDB_dbi dbi, std::uint64_t number,
                              DeletedRuns& deleted) {
  const auto prefix = codec::u64_key(number);
  lmdb::Cursor cursor(txn.get(), dbi);
  std::uint64_t removed = 0;
  for (;;) {
    MDB_val key = lmdb::val(std::span<const std::byte>(prefix));
    MDB_val value{};
    if (!cursor.get(key, value, MDB_SET_RANGE)) break;
    if (key.mv_size < prefix.size() ||
        std::memcmp(key.mv_data, prefix.data(), prefix.size()) != 0) {
      break;
    }
    deleted.bytes += key.mv_size + value.mv_size;
    cursor.del();
    ++removed;
  }
  return removed;
}

}  // namespace

Result<DeletedRuns> Writer::delete_runs(std::span<const RunId> runs) {
  auto reader = state_.reader();
  const Dbis& dbis = state_.env.dbis();
  std::map<RunId, codec::RunRecord> doomed;
  for (const RunId& id : runs) {
    auto record = reader.record(id);
    if (!record) {
      return std::unexpected(
          refuse(Refused::unknown_run, "cannot delete run " + id.str() + ": no such run"));
    }
    if (!doomed.emplace(id, std::move(*record)).second) {
      return std::unexpected(refuse(Refused::invalid_input,
                                    "run " + id.str() + " is named twice; nothing was deleted"));
    }
  }
  // A run forked from one of them keeps it, unless it goes too.
  lmdb::Cursor all(state_.txn.get(), dbis.runs);
  MDB_val key{};
  MDB_val value{};
  for (bool ok = all.get(key, value, MDB_FIRST); ok; ok = all.get(key, value, MDB_NEXT)) {
    const RunId child(std::string(lmdb::chars(key)));
    if (doomed.contains(child)) continue;
    const auto record = reader.record_or_corrupt(child);
    if (record.fork_of && doomed.contains(record.fork_of->parent)) {
      return std::unexpected(refuse(Refused::invalid_input,
                                    "cannot delete run " + record.fork_of->parent.str() + ": run " +
                                        child.str() + " forks from it; nothing was deleted"));
    }
  }
  DeletedRuns deleted;
  for (const auto& [id, record] : doomed) {
    deleted.events += delete_numbered(state_.txn, dbis.events, record.number, deleted);
    delete_numbered(state_.txn, dbis.event_ids, record.number, deleted);
    const auto number = codec::u64_key(record.number);
    if (auto stored = state_.txn.get(dbis.runs, lmdb::val(id.str()))) {
      deleted.bytes += id.str().size() + stored->mv_size;
    }
    state_.txn.del(dbis.run_numbers, lmdb::val(std::span<const std::byte>(number)));
    state_.txn.del(dbis.runs, lmdb::val(id.str()));
    deleted.bytes += number.size() + id.str().size();
    ++deleted.runs;
  }
  return deleted;
}

// ---- Snapshot ----

Snapshot::Snapshot(std::unique_ptr<State> state) : state_(std::move(state)) {}
Snapshot::~Snapshot() = default;
Snapshot::Snapshot(Snapshot&&) noexcept = default;
Snapshot& Snapshot::operator=(Snapshot&&) noexcept = default;

std::optional<RunInfo> Snapshot::run(const RunId& id) const {
  auto reader = state_->reader();
  auto record = reader.record(id);
  if (!record) return std::nullopt;
  return reader.info(*record);
}

std::vector<RunInfo> Snapshot::runs() const {
  auto reader = state_->reader();
  std::vector<RunInfo> result;
  lmdb::Cursor cursor(state_->use(), state_->env->dbis().run_numbers);
  MDB_val key{};
  MDB_val value{};
  for (bool ok = cursor.get(key, value, MDB_FIRST); ok; ok = cursor.get(key, value, MDB_NEXT)) {
    result.push_back(reader.info(reader.record_or_corrupt(RunId(std::string(lmdb::chars(value))))));
  }
  return result;
}

void Snapshot::for_each_event(const RunInfo& run, std::uint64_t from_seq,
                              const std::function<bool(const EventView&)>& visit) const {
  state_->reader().visit(as_record(run), from_seq, visit);
}

std::vector<Event> Snapshot::history(const RunInfo& run, std::uint64_t from_seq) const {
  std::vector<Event> events;
  // A hint only: `run` may come from an older snapshot.
  if (run.head >= from_seq) events.reserve(run.head - std::max<std::uint64_t>(from_seq, 1) + 1);
  for_each_event(run, from_seq, [&](const EventView& v) {
    events.push_back(v.to_event());
    return true;
  });
  return events;
}

std::uint64_t Snapshot::count(const RunInfo& run) const {
  return state_->reader().head(as_record(run));
}

std::optional<Event> Snapshot::find_event(const RunInfo& run, const EventId& id) const {
  return state_->reader().find_event(as_record(run), id.str());
}

std::vector<Event> Snapshot::events_of_type(const RunInfo& run, std::string_view type,
                                            std::uint64_t after_seq) const {
  return state_->reader().events_of_type(as_record(run), type, after_seq);
}

void Snapshot::write_segment(const RunInfo& run, std::uint64_t up_to_seq,
                             const std::function<void(std::span<const std::byte>)>& sink) const {
  state_->reader().stream_segment(as_record(run), up_to_seq, sink);
}

std::vector<std::byte> Snapshot::segment(const RunInfo& run, std::uint64_t up_to_seq) const {
  std::vector<std::byte> bytes;
  write_segment(run, up_to_seq, [&](std::span<const std::byte> chunk) {
    bytes.insert(bytes.end(), chunk.begin(), chunk.end());
  });
  return bytes;
}

std::optional<std::span<const std::byte>> Snapshot::blob(const Digest& digest) const {
  return blob::get(state_->use(), state_->env->dbis().blobs, digest);
}

bool Snapshot::has_blob(const Digest& digest) const {
  return blob(digest).has_value();
}

std::vector<BlobInfo> Snapshot::blobs() const {
  std::vector<BlobInfo> found;
  MDB_txn* txn = state_->use();
  const Dbis& dbis = state_->env->dbis();
  lmdb::Cursor all(txn, dbis.blobs);
  MDB_val key{};
  MDB_val value{};
  for (bool ok = all.get(key, value, MDB_FIRST); ok; ok = all.get(key, value, MDB_NEXT)) {
    std::array<std::uint8_t, Digest::kSize> raw{};
    if (key.mv_size != raw.size()) {
      throw StoreError("a blob key of " + std::to_string(key.mv_size) +
                       " bytes instead of 32; the store is corrupt");
    }
    std::memcpy(raw.data(), key.mv_data, raw.size());
    BlobInfo info{Digest(raw), value.mv_size, std::nullopt};
    MDB_val stamp{};
    const int rc = mdb_get(txn, dbis.blob_times, &key, &stamp);
    if (rc != MDB_NOTFOUND) {
      lmdb::check(rc, "mdb_get(blob_times)");
      info.stored_at = std::string(lmdb::chars(stamp));
    }
    found.push_back(std::move(info));
  }
  return found;
}

std::vector<Digest> Snapshot::missing_blobs(std::span<const Digest> digests) const {
  std::vector<Digest> missing;
  for (const Digest& d : digests) {
    if (!has_blob(d)) missing.push_back(d);
  }
  return missing;
}

}  // namespace forktrial::store