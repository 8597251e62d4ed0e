// The values the store reads and writes: events and run descriptions, and the
// rules an event or run must follow before the store writes it.
//
// Field meanings follow design.md ("Runtime semantics") and activegraph's
// event shape; the encoded form is schema/event.capnp.
//
// Thread-safety: plain values; the functions are pure and may be called from
// any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/digest.h"
#include "base/error.h"
#include "store/ids.h"

namespace forktrial::store {

// The longest event type, actor, frame id or timestamp, and the longest run
// label, creation time or frame id, the store accepts (ids: kMaxIdBytes).
inline constexpr std::size_t kMaxEventTextBytes = 1024;
// The most bytes an event's payload may hold: a stored event is one Cap'n
// Proto message, whose texts count their bytes (and a NUL) in 29 bits.
inline constexpr std::size_t kMaxPayloadBytes = (std::size_t{1} << 29) - 2;
// The longest run goal (a sentence or a prompt, longer than a label).
inline constexpr std::size_t kMaxRunGoalBytes = 64 * 1024;

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

// A view of `event` (seq 0), valid while `event` lives and is not changed.
EventView view_of(const NewEvent& event);

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
  // activegraph's run goal and frame id, kept from an imported store.
  std::optional<std::string> goal = std::nullopt;
  std::optional<std::string> frame_id = std::nullopt;
  // The client key a coordinator imported the run for ("": every client's
  // to fork), and the digest of the file it came from (NewRun).
  std::string owner = {};
  std::optional<Digest> source = std::nullopt;

  friend bool operator==(const RunInfo&, const RunInfo&) = default;
};

// How a new run is described by its creator. An absent id is generated
// ("run_" + 16 random hex digits); an absent created_at comes from the
// store's clock.
struct NewRun {
  std::optional<RunId> id = std::nullopt;
  std::string label = {};
  std::optional<std::string> created_at = std::nullopt;
  // activegraph's runs.goal and runs.frame_id (absent: NULL there).
  std::optional<std::string> goal = std::nullopt;
  std::optional<std::string> frame_id = std::nullopt;
  // Set by a coordinator importing a run for a client: the client's public
  // key, whose alone the run is to fork through it ("": every client's),
  // and the digest of the file imported, which tells a resend of the same
  // import from another file under the same id. The store keeps both and
  // enforces neither.
  std::string owner = {};
  std::optional<Digest> source = std::nullopt;
};

// The rule every text field of an event and of a run follows
// (docs/store-format.md, "Text fields"): valid UTF-8 without control
// characters (C0, DEL, C1), ids at most kMaxIdBytes and other text at most
// kMaxEventTextBytes; an event's id, type and timestamp and a run's id are
// never empty; an event's type and actor, names that readers compare, hold
// no invisible or format character (base/text.h is_invisible: "trial\u200b."
// is not "trial."). Candidates and imported runs choose this text, and
// everything that shows or serializes it relies on the rule.
//
// A problem is a Status (invalid_argument) whose message is the field, a
// short escaped excerpt of its value and what is wrong: `field "actor"
// "\x1b[2J" contains the control character U+001B at offset 0` (events),
// `label "caf\xe9" is not valid UTF-8 (byte 0xE9 at offset 3)` (runs). The
// caller names the event or run, unless its id is the bad field.
struct TextProblem : Status {
  // The field: "id", "type", "actor", "frame_id", "caused_by" or "timestamp"
  // of an event; "id", "label" or "created_at" of a run.
  std::string field;

  TextProblem(std::string name, std::string why)
      : Status{ErrorCode::invalid_argument, std::move(why)}, field(std::move(name)) {}
};
// The first field of `event` that breaks the rule, in the order id, type,
// actor, frame_id, caused_by, timestamp; nullopt when none does.
std::optional<TextProblem> event_text_problem(const NewEvent& event);
// The same for a new run: its id (when given), label, created_at, goal and
// frame_id (when given); fields "id", "label", "created_at", "goal",
// "frame_id".
std::optional<TextProblem> run_text_problem(const NewRun& run);

// Why Writer::append would refuse `event` on its own (an empty or oversized
// id, an empty type or timestamp, any other break of the text rule, a payload
// nested deeper than kMaxPayloadDepth of store/payload.h), or nullopt. A
// caller copying events from elsewhere checks them first, so that one bad
// event does not abort its transaction.
std::optional<std::string> event_problem(const NewEvent& event);

// What a write budget counts of an event: the bytes of its text fields (id,
// type, payload, timestamp, actor, frame_id, caused_by).
std::size_t event_text_bytes(const NewEvent& event);

}  // namespace forktrial::store
