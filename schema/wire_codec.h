// One wire frame <-> one Envelope (schema/wire.capnp), with the checks every
// receiver applies before it looks at a message: a size limit, whole words,
// a valid Cap'n Proto message with nothing after it, bounded traversal, and
// the protocol version. Whatever a peer sends, decoding returns a value: a
// message, or a WireError the receiver answers with and counts.
//
// Plain functions; thread-safe. A Frame owns its words; the Envelope reader
// it hands out is valid while the Frame lives.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <array>
#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <string_view>

#include "base/digest.h"
#include "base/error.h"
#include "schema/wire.capnp.h"

namespace forktrial::wire {

using schema::wire::Envelope;

// The largest frame a receiver takes: a report carries a trial's accepted
// delta (64 MiB by default, more if a batch raises the write budget).
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{256} << 20;

class Frame {
 public:
  Envelope::Reader envelope() const { return reader_->getRoot<Envelope>(); }

 private:
  friend std::expected<Frame, Status> decode(std::string_view, std::size_t);
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

// Checks and opens one frame. Refused: over `max_bytes` (resource_exhausted),
// not a whole number of words or not a message, another protocol version, an
// arm this build does not know, a Text field that is not valid UTF-8 (naming
// the field by its path, "report.trial.job"; all invalid_argument), except the fields
// is_prose_field names, which are read with prose(), and a report's events, which the delta rules
// check (docs/wire-protocol.md, "Text from a peer").
std::expected<Frame, Status> decode(std::string_view frame,
                                    std::size_t max_bytes = kDefaultMaxFrameBytes);

// The Text fields a peer's prose travels in, repaired rather than refused:
// Error.message, Report.detail, Report.warnings, AttemptFailed.reason,
// WorkerHello.warnings, ReportAck.reason and WorkerGoodbye.reason, named
// "Struct.field". Report.events is named too: its Text is the trial's delta,
// which the store's rules judge event by event.
bool is_prose_field(std::string_view struct_name, std::string_view field_name);
// The messages only a worker sends (its hello, offers, heartbeats, reports,
// failed attempts, blob fetches and goodbye); every other peer message is a
// client's.
bool is_worker_message(schema::wire::Envelope::Which which);

namespace detail {
// The first segment of a MessageBuilder: this thread's scratch buffer,
// zeroed, when no other builder holds it; otherwise a small zeroed array of
// its own.
class FirstSegment {
 protected:
  FirstSegment();
  ~FirstSegment();
  FirstSegment(const FirstSegment&) = delete;
  FirstSegment& operator=(const FirstSegment&) = delete;
  kj::ArrayPtr<capnp::word> segment() const { return segment_; }

 private:
  kj::ArrayPtr<capnp::word> segment_;
  std::unique_ptr<capnp::word[]> own_;
};
}  // namespace detail

// A message builder for the messages a peer sends, one after another.
// capnp's MallocMessageBuilder asks calloc for zeroed segments; for a
// segment past jemalloc's small sizes that zeroing is an madvise that
// flushes the TLB of every CPU, and the coordinator sends thousands of
// messages a second. This one builds in a reused buffer (1 MiB, zeroed once;
// capnp zeroes what a message used when it is destroyed), so a message of
// up to that size allocates nothing.
class MessageBuilder : private detail::FirstSegment, public capnp::MallocMessageBuilder {
 public:
  MessageBuilder() : capnp::MallocMessageBuilder(segment()) {}
};

// The frame of a built message.
std::string encode(capnp::MessageBuilder& message);

// A new envelope of this protocol version answering (or asking) `request_id`.
Envelope::Builder start(capnp::MessageBuilder& message, std::uint64_t request_id);

// The frame of an Error envelope.
std::string error_frame(std::uint64_t request_id, const Status& status);

// The wire's ErrorCode is forktrial's ErrorCode, one to one.
schema::wire::ErrorCode wire_code(ErrorCode code);
// The Status an Error carries, its message read with prose(). A code past
// the last this build knows (a newer peer's) is internal, saying so.
Status status_of(schema::wire::Error::Reader error);

// Digests on the wire: 32 bytes of SHA-256.
void set_digest(schema::wire::Digest::Builder builder, const Digest& digest);
std::optional<Digest> digest_of(schema::wire::Digest::Reader reader);

// On the wire, a trial specification names each pack by the blob holding its
// archive (pack/bundle_archive.h) instead of a directory: its root_dir is
// "bundle:<64 hex>". The worker materializes it and puts the directory there.
inline constexpr std::string_view kBundleRootPrefix = "bundle:";
std::string bundle_root(const Digest& archive);
std::optional<Digest> archive_of_root(std::string_view root_dir);

// Text of a Cap'n Proto Text field, as sent: decode() refused the frame if
// it is not valid UTF-8 (for the fields it checks).
inline std::string text(capnp::Text::Reader reader) {
  return {reader.begin(), reader.size()};
}

// The most of an Error's message a receiver keeps.
inline constexpr std::size_t kMaxErrorMessageBytes = std::size_t{64} << 10;

// A report verdict's name as docs/wire-protocol.md spells it ("accepted",
// "fenced", ...); "verdict <n>" for a number past the enum's last value.
std::string verdict_name(schema::wire::ReportVerdict verdict);

// A prose field (is_prose_field) made fit to keep and show: invalid UTF-8
// repaired (U+FFFD) and cut to `max_bytes` with a marker saying how much was
// cut (base/text.h bounded_text; `max_bytes` at least 64).
std::string prose(capnp::Text::Reader reader, std::size_t max_bytes);

}  // namespace forktrial::wire
