// The records only forktrial writes, and the names that mark them: what the
// runtime refuses to candidates (runtime/reserved_names.h) and what the delta
// rules refuse in a trial child's or a worker's delta (sandbox/delta.h)
// are decided by these, on both sides of every process and machine boundary.
//
// Pure constants and functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace forktrial::schema {

// The trial's parent process writes trial.* records, as this actor.
inline constexpr std::string_view kParentActor = "forktrial.parent";
inline constexpr std::string_view kWallClockExhausted = "trial.wall_clock_exhausted";
// The runtime writes pack.loaded, behavior.* and runtime.* records, as this
// actor.
inline constexpr std::string_view kRuntimeActor = "runtime";
inline constexpr std::string_view kBehaviorFailed = "behavior.failed";

// What the runtime's closing record of the write budget may add beyond the
// budget: one event of at most this many bytes (store::event_text_bytes).
inline constexpr std::uint64_t kClosingRecords = 1;
inline constexpr std::uint64_t kClosingRecordBytes = 4096;

// "trial.*": records of the trial's parent process.
constexpr bool is_parent_type(std::string_view type) {
  return type.starts_with("trial.");
}
// "forktrial.*": reserved for forktrial's own records.
constexpr bool is_forktrial_type(std::string_view type) {
  return type.starts_with("forktrial.");
}
// Actors starting with "forktrial".
constexpr bool is_forktrial_actor(std::string_view actor) {
  return actor.starts_with("forktrial");
}
// The runtime's own records: pack.loaded, behavior.* and runtime.* (the
// graph's types, which it also writes, carry the actor of whoever changed
// the graph).
constexpr bool is_runtime_record_type(std::string_view type) {
  return type.starts_with("runtime.") || type.starts_with("behavior.") || type == "pack.loaded";
}

}  // namespace forktrial::schema
