#include "schema/wire_codec.h"

#include <capnp/dynamic.h>
#include <kj/io.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/text.h"

namespace forktrial::wire {
namespace {

// Where a field is, built into text only when it is named in an error
// ("report.trial.job", "report.events[3].id"): checking a message builds no
// string.
struct Path {
  const Path* up = nullptr;
  std::string_view name;          // a field's
  std::optional<unsigned> index;  // or an element's of the list `up` names

  std::string str() const {
    if (index) return up->str() + "[" + std::to_string(*index) + "]";
    if (up == nullptr || (up->up == nullptr && up->name.empty())) return std::string(name);
    return up->str() + "." + std::string(name);
  }
};

// What checking a struct needs of its schema, worked out once per struct
// type: the fields that may hold Text (directly or below them), prose fields
// left out.
struct TextField {
  capnp::StructSchema::Field field;
  std::string name;
  bool group = false;
  bool checked = false;  // may hold Text, and not prose
};
struct StructFields {
  std::vector<TextField> by_index;  // every field, by its index
  std::vector<unsigned> non_union;  // the checked ones outside the union
};

const StructFields& fields_of(capnp::StructSchema schema) {
  // Finite: one entry per struct type of the schema, per thread.
  thread_local std::unordered_map<std::uint64_t, StructFields> known;
  const std::uint64_t id = schema.getProto().getId();
  if (const auto found = known.find(id); found != known.end()) return found->second;
  StructFields fields;
  const auto owner = schema.getShortDisplayName();
  const std::string_view owner_name(owner.cStr(), owner.size());
  for (auto field : schema.getFields()) {
    const auto proto = field.getProto();
    TextField entry{field, std::string(proto.getName().cStr(), proto.getName().size()),
                    proto.isGroup(), false};
    const auto type = field.getType();
    entry.checked = (type.isText() || type.isStruct() || type.isList()) &&
                    !is_prose_field(owner_name, entry.name);
    fields.by_index.push_back(std::move(entry));
  }
  for (auto field : schema.getNonUnionFields()) {
    if (fields.by_index[field.getIndex()].checked) fields.non_union.push_back(field.getIndex());
  }
  return known.emplace(id, std::move(fields)).first->second;
}

std::optional<std::string> struct_text_problem(capnp::DynamicStruct::Reader reader,
                                               const Path& path);

// Why a Text in `value`, found at `path`, is not valid UTF-8; nullopt when
// every one is.
std::optional<std::string> value_text_problem(capnp::DynamicValue::Reader value, const Path& path) {
  switch (value.getType()) {
    case capnp::DynamicValue::TEXT: {
      const auto text = value.as<capnp::Text>();
      const std::string_view view(text.begin(), text.size());
      if (auto at = first_invalid_utf8(view)) {
        char byte[8];
        std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(view[*at]));
        return "field " + path.str() + " is not valid UTF-8 (byte " + byte + " at offset " +
               std::to_string(*at) + ")";
      }
      return std::nullopt;
    }
    case capnp::DynamicValue::STRUCT:
      return struct_text_problem(value.as<capnp::DynamicStruct>(), path);
    case capnp::DynamicValue::LIST: {
      const auto list = value.as<capnp::DynamicList>();
      for (unsigned i = 0; i < list.size(); ++i) {
        if (auto problem = value_text_problem(list[i], Path{&path, {}, i})) return problem;
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// Every field of `reader` that holds Text, directly or below it: its
// non-union fields and its union's active one, prose fields left out.
std::optional<std::string> struct_text_problem(capnp::DynamicStruct::Reader reader,
                                               const Path& path) {
  const StructFields& fields = fields_of(reader.getSchema());
  auto visit = [&](const TextField& entry) -> std::optional<std::string> {
    if (!entry.checked) return std::nullopt;
    if (!entry.group && !reader.has(entry.field)) return std::nullopt;
    return value_text_problem(reader.get(entry.field), Path{&path, entry.name, {}});
  };
  for (const unsigned index : fields.non_union) {
    if (auto problem = visit(fields.by_index[index])) return problem;
  }
  KJ_IF_MAYBE (active, reader.which()) {
    return visit(fields.by_index[active->getIndex()]);
  }
  return std::nullopt;
}

}  // namespace

std::string verdict_name(schema::wire::ReportVerdict verdict) {
  using V = schema::wire::ReportVerdict;
  switch (verdict) {
    case V::ACCEPTED:
      return "accepted";
    case V::FENCED:
      return "fenced";
    case V::DUPLICATE:
      return "duplicate";
    case V::UNKNOWN:
      return "unknown";
    case V::REFUSED:
      return "refused";
  }
  return "verdict " + std::to_string(static_cast<std::uint16_t>(verdict));
}

bool is_worker_message(schema::wire::Envelope::Which which) {
  using schema::wire::Envelope;
  switch (which) {
    case Envelope::WORKER_HELLO:
    case Envelope::REQUEST_WORK:
    case Envelope::HEARTBEAT:
    case Envelope::REPORT:
    case Envelope::ATTEMPT_FAILED:
    case Envelope::FETCH_BLOB:
    case Envelope::WORKER_GOODBYE:
      return true;
    default:
      return false;
  }
}

bool is_prose_field(std::string_view struct_name, std::string_view field_name) {
  struct Named {
    std::string_view owner;
    std::string_view field;
  };
  static constexpr Named kProse[] = {{"Error", "message"},        {"Report", "detail"},
                                     {"Report", "warnings"},      {"Report", "events"},
                                     {"AttemptFailed", "reason"}, {"WorkerHello", "warnings"},
                                     {"ReportAck", "reason"},     {"WorkerGoodbye", "reason"}};
  for (const Named& named : kProse) {
    if (named.owner == struct_name && named.field == field_name) return true;
  }
  return false;
}

std::string prose(capnp::Text::Reader reader, std::size_t max_bytes) {
  return bounded_text(std::string_view(reader.begin(), reader.size()), max_bytes);
}

std::expected<Frame, Status> decode(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return std::unexpected(Status{ErrorCode::resource_exhausted,
                                  "the frame is " + std::to_string(bytes.size()) +
                                      " bytes; the limit is " + std::to_string(max_bytes)});
  }
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return std::unexpected(Status{ErrorCode::invalid_argument,
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
          Status{ErrorCode::invalid_argument, "the frame has bytes after its message"});
    }
    auto envelope = frame.envelope();
    if (envelope.getVersion() != schema::wire::K_PROTOCOL_VERSION) {
      return std::unexpected(Status{ErrorCode::invalid_argument,
                                    "the message speaks protocol version " +
                                        std::to_string(envelope.getVersion()) + "; this is " +
                                        std::to_string(schema::wire::K_PROTOCOL_VERSION)});
    }
    // An arm newer than this build reads as an ordinal past the last known.
    if (static_cast<unsigned>(envelope.which()) > static_cast<unsigned>(Envelope::WORKER_GOODBYE)) {
      return std::unexpected(Status{ErrorCode::invalid_argument,
                                    "message arm " +
                                        std::to_string(static_cast<unsigned>(envelope.which())) +
                                        " is not one this peer knows"});
    }
    // Text a peer sent is refused here, before anyone keeps or shows it.
    if (auto problem = struct_text_problem(capnp::toDynamic(envelope), Path{})) {
      return std::unexpected(Status{ErrorCode::invalid_argument, "the message's " + *problem});
    }
  } catch (const kj::Exception& e) {
    return std::unexpected(
        Status{ErrorCode::invalid_argument,
               "the frame is not a valid message: " + std::string(e.getDescription().cStr())});
  }
  return frame;
}

namespace detail {
namespace {
constexpr std::size_t kScratchWords = (std::size_t{1} << 20) / sizeof(capnp::word);
constexpr std::size_t kNestedWords = 1024;
struct Scratch {
  std::unique_ptr<capnp::word[]> words;  // zeroed wherever no builder writes
  bool held = false;
};
thread_local Scratch scratch;
}  // namespace

FirstSegment::FirstSegment() {
  if (!scratch.held) {
    if (!scratch.words) scratch.words = std::make_unique<capnp::word[]>(kScratchWords);
    scratch.held = true;
    segment_ = kj::arrayPtr(scratch.words.get(), kScratchWords);
  } else {
    own_ = std::make_unique<capnp::word[]>(kNestedWords);  // value-initialized: zeroed
    segment_ = kj::arrayPtr(own_.get(), kNestedWords);
  }
}

FirstSegment::~FirstSegment() {
  // The builder, destroyed before this, has zeroed what it wrote.
  if (!own_) scratch.held = false;
}
}  // namespace detail

std::string encode(capnp::MessageBuilder& message) {
  // The frame written once, into the string that carries it.
  const auto segments = message.getSegmentsForOutput();
  const std::size_t bytes = capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word);
  std::string frame;
  frame.resize_and_overwrite(bytes, [&](char* out, std::size_t size) {
    kj::ArrayOutputStream stream(kj::arrayPtr(reinterpret_cast<kj::byte*>(out), size));
    capnp::writeMessage(stream, segments);
    return size;
  });
  return frame;
}

Envelope::Builder start(capnp::MessageBuilder& message, std::uint64_t request_id) {
  auto envelope = message.initRoot<Envelope>();
  envelope.setVersion(schema::wire::K_PROTOCOL_VERSION);
  envelope.setRequestId(request_id);
  return envelope;
}

std::string error_frame(std::uint64_t request_id, const Status& status) {
  MessageBuilder builder;
  auto error = start(builder, request_id).initError();
  error.setCode(wire_code(status.code));
  error.setMessage(status.message);
  return encode(builder);
}

// One to one, in the same order: checked here, once (and the names by
// wire_codec_test).
constexpr bool same_ordinals() {
  using W = schema::wire::ErrorCode;
  constexpr std::array<std::pair<W, ErrorCode>, 8> pairs = {{
      {W::NOT_FOUND, ErrorCode::not_found},
      {W::INVALID_ARGUMENT, ErrorCode::invalid_argument},
      {W::FAILED_PRECONDITION, ErrorCode::failed_precondition},
      {W::CONFLICT, ErrorCode::conflict},
      {W::RESOURCE_EXHAUSTED, ErrorCode::resource_exhausted},
      {W::UNAVAILABLE, ErrorCode::unavailable},
      {W::CANCELLED, ErrorCode::cancelled},
      {W::INTERNAL, ErrorCode::internal},
  }};
  for (const auto& [wire, code] : pairs) {
    if (static_cast<unsigned>(wire) != static_cast<unsigned>(code)) return false;
  }
  return pairs.size() == kErrorCodes.size();
}
static_assert(same_ordinals());

schema::wire::ErrorCode wire_code(ErrorCode code) {
  return static_cast<schema::wire::ErrorCode>(static_cast<unsigned>(code));
}

Status status_of(schema::wire::Error::Reader error) {
  const auto ordinal = static_cast<unsigned>(error.getCode());
  std::string message = prose(error.getMessage(), kMaxErrorMessageBytes);
  if (ordinal >= kErrorCodes.size()) {
    return {ErrorCode::internal, "error code " + std::to_string(ordinal) +
                                     ", which this build does not know: " + message};
  }
  return {kErrorCodes[ordinal], std::move(message)};
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
