// Typed identifiers of the store: a RunId and an EventId are distinct types,
// so one cannot be passed where the other is meant.
//
// Both are opaque text chosen by whoever created the run or event (activegraph
// uses "run_<hex>" and "evt_001"); the store only requires them to be
// non-empty and at most kMaxIdBytes bytes, since they are LMDB keys.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace forktrial::store {

// LMDB's default maximum key size is 511 bytes. The event-id index stores an
// id behind an 8-byte run number in an encoding that at most doubles it
// (docs/store-format.md, "event_ids"), hence 250.
inline constexpr std::size_t kMaxIdBytes = 250;

template <typename Tag>
class StringId {
 public:
  StringId() = default;
  explicit StringId(std::string value) : value_(std::move(value)) {}

  const std::string& str() const { return value_; }
  bool empty() const { return value_.empty(); }

  friend bool operator==(const StringId&, const StringId&) = default;
  friend auto operator<=>(const StringId&, const StringId&) = default;

 private:
  std::string value_;
};

using RunId = StringId<struct RunIdTag>;
using EventId = StringId<struct EventIdTag>;

// The id of event number `n` of a run's counter, as activegraph writes it:
// "evt_" and the number, zero-padded to at least three digits ("evt_007",
// "evt_1234").
EventId numbered_event_id(std::uint64_t n);

// What a run is, told by its id: the runs forktrial names itself are hidden
// from listings unless asked for (`forktrial run ls --all`).
enum class RunKind : std::uint8_t {
  user,        // imported or created by a user: any other id
  trial_fork,  // a trial's fork: run_trial_... (local), run_job_... (a cluster's)
  internal,    // forktrial's own bookkeeping: forktrial.* (the orchestration log)
};
inline constexpr std::string_view kTrialForkPrefix = "run_trial_";
inline constexpr std::string_view kJobForkPrefix = "run_job_";
inline constexpr std::string_view kInternalRunPrefix = "forktrial.";
RunKind run_kind(std::string_view id);

// The id of a local trial's fork made of a drawn run id ("run_<hex>" becomes
// "run_trial_<hex>"; any other text is kept behind the prefix).
RunId trial_fork_id(const RunId& drawn);

}  // namespace forktrial::store

template <typename Tag>
struct std::hash<forktrial::store::StringId<Tag>> {
  std::size_t operator()(const forktrial::store::StringId<Tag>& id) const noexcept {
    return std::hash<std::string>{}(id.str());
  }
};
