#include "schema/wire_codec.h"

#include <cstring>

namespace forktrial::wire {

std::expected<Frame, WireError> decode(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return std::unexpected(
        WireError{ErrorCode::TOO_LARGE, "the frame is " + std::to_string(bytes.size()) +
                                            " bytes; the limit is " + std::to_string(max_bytes)});
  }
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return std::unexpected(WireError{ErrorCode::MALFORMED,
                                     "the frame is " + std::to_string(bytes.size()) +
                                         " bytes, not a whole, non-zero number of 8-byte words"});
  }
  Frame frame;
  // Copy into word-aligned memory: ZeroMQ's buffers have no alignment promise.
  frame.words_ = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(frame.words_.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    // Every word may be read a few times over (a far pointer, a list of
    // structs), never more: bounded by the frame, not by what it claims.
    options.traversalLimitInWords = frame.words_.size() * 4 + 1024;
    options.nestingLimit = 32;
    frame.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(frame.words_, options);
    if (frame.reader_->getEnd() != frame.words_.end()) {
      return std::unexpected(
          WireError{ErrorCode::MALFORMED, "the frame has bytes after its message"});
    }
    auto envelope = frame.envelope();
    if (envelope.getVersion() != schema::wire::K_PROTOCOL_VERSION) {
      return std::unexpected(WireError{ErrorCode::WRONG_VERSION,
                                       "the message speaks protocol version " +
                                           std::to_string(envelope.getVersion()) + "; this is " +
                                           std::to_string(schema::wire::K_PROTOCOL_VERSION)});
    }
    // An arm newer than this build reads as an ordinal past the last known.
    if (static_cast<unsigned>(envelope.which()) > static_cast<unsigned>(Envelope::OK)) {
      return std::unexpected(WireError{ErrorCode::UNKNOWN_MESSAGE,
                                       "message arm " +
                                           std::to_string(static_cast<unsigned>(envelope.which())) +
                                           " is not one this peer knows"});
    }
  } catch (const kj::Exception& e) {
    return std::unexpected(
        WireError{ErrorCode::MALFORMED,
                  "the frame is not a valid message: " + std::string(e.getDescription().cStr())});
  }
  return frame;
}

std::string encode(capnp::MessageBuilder& message) {
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

Envelope::Builder start(capnp::MessageBuilder& message, std::uint64_t request_id) {
  auto envelope = message.initRoot<Envelope>();
  envelope.setVersion(schema::wire::K_PROTOCOL_VERSION);
  envelope.setRequestId(request_id);
  return envelope;
}

std::string error_frame(std::uint64_t request_id, ErrorCode code, const std::string& message) {
  capnp::MallocMessageBuilder builder;
  auto error = start(builder, request_id).initError();
  error.setCode(code);
  error.setMessage(message);
  return encode(builder);
}

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::MALFORMED:
      return "malformed";
    case ErrorCode::WRONG_VERSION:
      return "wrong_version";
    case ErrorCode::UNKNOWN_MESSAGE:
      return "unknown_message";
    case ErrorCode::OUT_OF_ORDER:
      return "out_of_order";
    case ErrorCode::TOO_LARGE:
      return "too_large";
    case ErrorCode::REFUSED:
      return "refused";
    case ErrorCode::NOT_FOUND:
      return "not_found";
    case ErrorCode::BUSY:
      return "busy";
  }
  return "unknown";
}

void set_digest(schema::wire::Digest::Builder builder, const Digest& digest) {
  builder.setSha256(capnp::Data::Reader(digest.bytes().data(), digest.bytes().size()));
}

std::optional<Digest> digest_of(schema::wire::Digest::Reader reader) {
  auto data = reader.getSha256();
  if (data.size() != Digest::kSize) return std::nullopt;
  std::array<std::uint8_t, Digest::kSize> bytes{};
  std::memcpy(bytes.data(), data.begin(), Digest::kSize);
  return Digest(bytes);
}

std::string bundle_root(const Digest& archive) {
  return std::string(kBundleRootPrefix) + archive.hex();
}

std::optional<Digest> archive_of_root(std::string_view root_dir) {
  if (!root_dir.starts_with(kBundleRootPrefix)) return std::nullopt;
  root_dir.remove_prefix(kBundleRootPrefix.size());
  return Digest::parse(std::string(Digest::kPrefix) + std::string(root_dir));
}

}  // namespace forktrial::wire
