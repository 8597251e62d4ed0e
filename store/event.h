// The values the store reads and writes: events and run descriptions.
//
// Field meanings follow design.md ("Runtime semantics") and activegraph's
// event shape; the encoded form is schema/event.capnp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/ids.h"

namespace forktrial::store {

// An event as a writer hands it to the store; the store assigns `seq`.
struct NewEvent {
  EventId id = {};
  std::string type = {};
  std::string payload = "{}";  // JSON object text; the store does not parse it
  std::string timestamp = {};  // ISO-8601 UTC
  std::optional<std::string> actor = std::nullopt;
  std::optional<std::string> frame_id = std::nullopt;
  std::optional<EventId> caused_by = std::nullopt;

  friend bool operator==(const NewEvent&, const NewEvent&) = default;
};

// An event as read back: the written fields plus its position in the run's
// history (1-based, continuous through the run's lineage).
struct Event : NewEvent {
  std::uint64_t seq = 0;

  friend bool operator==(const Event&, const Event&) = default;
};

// An event decoded in place. Every view points into the store's memory and is
// valid only while the callback that received it runs.
struct EventView {
  std::string_view id;
  std::string_view type;
  std::string_view payload;
  std::string_view timestamp;
  std::optional<std::string_view> actor;
  std::optional<std::string_view> frame_id;
  std::optional<std::string_view> caused_by;
  std::uint64_t seq = 0;

  Event to_event() const;
};

// Where a fork branches: its parent's history up to and including `event_id`
// (at `seq`) is the fork's inherited prefix.
struct ForkPoint {
  RunId parent;
  EventId event_id;
  std::uint64_t seq = 0;

  friend bool operator==(const ForkPoint&, const ForkPoint&) = default;
};

// A run as described by the store. `head` is the seq of the last event in
// the run's history (its own or inherited), 0 for an empty root run; it is the
// value an append must state as its expected head, and equals the number of
// events the run's history holds. `number` is the store-internal key of the
// run (docs/store-format.md), stable for the life of the store.
struct RunInfo {
  RunId id;
  std::string label;
  std::string created_at;
  std::optional<ForkPoint> fork_of;
  std::uint64_t head = 0;
  std::uint64_t number = 0;

  friend bool operator==(const RunInfo&, const RunInfo&) = default;
};

// How a new run is described by its creator. An absent id is generated
// ("run_" + 16 random hex digits); an absent created_at comes from the
// store's clock.
struct NewRun {
  std::optional<RunId> id = std::nullopt;
  std::string label = {};
  std::optional<std::string> created_at = std::nullopt;
};

}  // namespace forktrial::store
