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
#include "schema/wire.capnp.h"

namespace forktrial::wire {

using schema::wire::Envelope;
using schema::wire::ErrorCode;

// The largest frame a receiver takes: a report carries a trial's accepted
// delta (64 MiB by default, more if a batch raises the write budget).
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{256} << 20;

struct WireError {
  ErrorCode code;
  std::string message;
};

class Frame {
 public:
  Envelope::Reader envelope() const { return reader_->getRoot<Envelope>(); }

 private:
  friend std::expected<Frame, WireError> decode(std::string_view, std::size_t);
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

// Checks and opens one frame. Refused: over `max_bytes` (tooLarge), not a
// whole number of words or not a message (malformed), another protocol
// version (wrongVersion), an arm this build does not know (unknownMessage).
std::expected<Frame, WireError> decode(std::string_view frame,
                                       std::size_t max_bytes = kDefaultMaxFrameBytes);

// The frame of a built message.
std::string encode(capnp::MessageBuilder& message);

// A new envelope of this protocol version answering (or asking) `request_id`.
Envelope::Builder start(capnp::MessageBuilder& message, std::uint64_t request_id);

// The frame of an Error envelope.
std::string error_frame(std::uint64_t request_id, ErrorCode code, const std::string& message);

// Every error code, in ordinal order, and each one's name in snake_case
// ("out_of_order"): the label the daemons' metrics count refusals under. A
// code this build does not know (a newer peer's) is "unknown".
inline constexpr std::array kErrorCodes = {ErrorCode::MALFORMED,       ErrorCode::WRONG_VERSION,
                                           ErrorCode::UNKNOWN_MESSAGE, ErrorCode::OUT_OF_ORDER,
                                           ErrorCode::TOO_LARGE,       ErrorCode::REFUSED,
                                           ErrorCode::NOT_FOUND,       ErrorCode::BUSY};
std::string_view error_code_name(ErrorCode code);

// Digests on the wire: 32 bytes of SHA-256.
void set_digest(schema::wire::Digest::Builder builder, const Digest& digest);
std::optional<Digest> digest_of(schema::wire::Digest::Reader reader);

// On the wire, a trial specification names each pack by the blob holding its
// archive (pack/bundle_archive.h) instead of a directory: its root_dir is
// "bundle:<64 hex>". The worker materializes it and puts the directory there.
inline constexpr std::string_view kBundleRootPrefix = "bundle:";
std::string bundle_root(const Digest& archive);
std::optional<Digest> archive_of_root(std::string_view root_dir);

// Text of a Cap'n Proto Text field.
inline std::string text(capnp::Text::Reader reader) {
  return {reader.begin(), reader.size()};
}

}  // namespace forktrial::wire
