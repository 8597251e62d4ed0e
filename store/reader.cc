#include "store/reader.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "store/lmdb.h"

namespace forktrial::store {
namespace {

constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();

}  // namespace

std::optional<codec::RunRecord> TxnReader::record(const RunId& id) const {
  if (id.empty() || id.str().size() > kMaxIdBytes) return std::nullopt;
  MDB_val key = lmdb::val(id.str());
  MDB_val value{};
  int rc = mdb_get(txn_, dbis_.runs, &key, &value);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  lmdb::check(rc, "mdb_get(runs)");
  return codec::decode_run(lmdb::bytes(value));
}

codec::RunRecord TxnReader::record_or_corrupt(const RunId& id) const {
  auto r = record(id);
  if (!r) {
    throw StoreError("run " + id.str() +
                     " is named as a parent in the store but has no record; the store is "
                     "corrupt");
  }
  return *r;
}

std::uint64_t TxnReader::own_last(std::uint64_t number) const {
  lmdb::Cursor cursor(txn_, dbis_.events);
  auto start = codec::event_key(number + 1, 0);
  MDB_val key = lmdb::val(std::span<const std::byte>(start));
  MDB_val value{};
  bool found = cursor.get(key, value, MDB_SET_RANGE) ? cursor.get(key, value, MDB_PREV)
                                                     : cursor.get(key, value, MDB_LAST);
  if (!found || key.mv_size != 16) return 0;
  auto* k = static_cast<const std::byte*>(key.mv_data);
  return codec::get_u64(k) == number ? codec::get_u64(k + 8) : 0;
}

std::uint64_t TxnReader::head(const codec::RunRecord& r) const {
  std::uint64_t fork_seq = r.fork_of ? r.fork_of->seq : 0;
  return std::max(own_last(r.number), fork_seq);
}

RunInfo TxnReader::info(const codec::RunRecord& r) const {
  return RunInfo{r.id,     r.label, r.created_at, r.fork_of, head(r),
                 r.number, r.goal,  r.frame_id,   r.owner,   r.source};
}

std::vector<Range> TxnReader::lineage(const codec::RunRecord& run) const {
  std::vector<Range> ranges;
  codec::RunRecord current = run;
  std::uint64_t limit = kNoLimit;
  for (;;) {
    std::uint64_t lower = current.fork_of ? current.fork_of->seq + 1 : 1;
    if (lower <= limit) ranges.push_back({current.number, lower, limit});
    if (!current.fork_of) break;
    limit = std::min(limit, current.fork_of->seq);
    current = record_or_corrupt(current.fork_of->parent);
  }
  std::reverse(ranges.begin(), ranges.end());
  return ranges;
}

std::vector<Range> TxnReader::inherited(const codec::RunRecord& run) const {
  auto ranges = lineage(run);
  if (!ranges.empty() && ranges.back().number == run.number) ranges.pop_back();
  return ranges;
}

std::optional<std::uint64_t> TxnReader::find_seq(const std::vector<Range>& ranges,
                                                 std::string_view event_id) const {
  if (event_id.empty() || event_id.size() > kMaxIdBytes) return std::nullopt;
  for (const Range& range : ranges) {
    std::byte key_bytes[codec::kMaxEventIdKeyBytes];
    MDB_val key{codec::event_id_key(range.number, event_id, key_bytes), key_bytes};
    MDB_val value{};
    int rc = mdb_get(txn_, dbis_.event_ids, &key, &value);
    if (rc == MDB_NOTFOUND) continue;
    lmdb::check(rc, "mdb_get(event_ids)");
    std::uint64_t seq = codec::get_u64(static_cast<const std::byte*>(value.mv_data));
    if (seq >= range.lower && seq <= range.upper) return seq;
  }
  return std::nullopt;
}

template <typename Visit>
void TxnReader::scan(const std::vector<Range>& ranges, std::uint64_t from_seq, std::uint64_t to_seq,
                     Visit&& visit) const {
  lmdb::Cursor cursor(txn_, dbis_.events);
  for (const Range& range : ranges) {
    std::uint64_t start = std::max(range.lower, from_seq);
    std::uint64_t end = std::min(range.upper, to_seq);
    if (start > end) continue;
    auto start_key = codec::event_key(range.number, start);
    MDB_val key = lmdb::val(std::span<const std::byte>(start_key));
    MDB_val value{};
    for (bool ok = cursor.get(key, value, MDB_SET_RANGE); ok;
         ok = cursor.get(key, value, MDB_NEXT)) {
      auto* k = static_cast<const std::byte*>(key.mv_data);
      if (key.mv_size != 16 || codec::get_u64(k) != range.number) break;
      std::uint64_t seq = codec::get_u64(k + 8);
      if (seq > end) break;
      if (!visit(seq, lmdb::bytes(value))) return;
    }
  }
}

void TxnReader::stream_segment(const codec::RunRecord& run, std::uint64_t up_to_seq,
                               const SegmentWriter::Sink& sink) const {
  SegmentWriter segment(run.id.str(), up_to_seq, sink);
  // A segment holds canonical encodings: deflated events are inflated, so
  // the same history gives the same segment whichever store holds it.
  std::vector<std::byte> inflated;
  scan(lineage(run), 1, up_to_seq, [&](std::uint64_t seq, std::span<const std::byte> value) {
    segment.add(seq, codec::canonical_event(value, inflated));
    return true;
  });
  segment.finish();
}

void TxnReader::visit(const codec::RunRecord& run, std::uint64_t from_seq,
                      const std::function<bool(const EventView&)>& visit) const {
  codec::EventDecoder decoder;
  scan(lineage(run), from_seq, kNoLimit, [&](std::uint64_t, std::span<const std::byte> value) {
    return visit(decoder.decode(value));
  });
}

std::optional<Event> TxnReader::find_event(const codec::RunRecord& run, std::string_view id) const {
  auto seq = find_seq(lineage(run), id);
  if (!seq) return std::nullopt;
  std::optional<Event> found;
  visit(run, *seq, [&](const EventView& v) {
    found = v.to_event();
    return false;
  });
  return found;
}

std::vector<Event> TxnReader::events_of_type(const codec::RunRecord& run, std::string_view type,
                                             std::uint64_t after_seq) const {
  std::vector<Event> found;
  visit(run, after_seq + 1, [&](const EventView& v) {
    if (v.type == type) found.push_back(v.to_event());
    return true;
  });
  return found;
}

}  // namespace forktrial::store
