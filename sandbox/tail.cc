#include "sandbox/tail.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "base/text.h"
#include "schema/trial.capnp.h"

namespace forktrial::sandbox {
namespace {

// Outcome and Net have the ordinals of their Cap'n Proto counterparts
// (schema/outcome.h), so encoding is a cast and decoding a range check.
schema::TrialOutcome to_wire(Outcome outcome) {
  return static_cast<schema::TrialOutcome>(std::to_underlying(outcome));
}

schema::Net to_wire(Net net) {
  return static_cast<schema::Net>(std::to_underlying(net));
}

std::string_view text_of(capnp::Text::Reader text) {
  return std::string_view(text.begin(), text.size());
}

}  // namespace

std::string encode_tail(const ChildTail& tail) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::TrialTail>();
  root.setOutcome(to_wire(tail.outcome));
  root.setNet(to_wire(tail.net));
  root.setEventsAppended(tail.events_appended);
  root.setBehaviorFailures(tail.behavior_failures);
  root.setLastSeq(tail.last_seq);
  root.setDetail(bounded_text(tail.detail, kMaxTailDetailBytes));
  // At most kMaxTailWarnings; when there are more, the last says how many.
  const std::size_t count = std::min(tail.warnings.size(), kMaxTailWarnings);
  const std::size_t kept = count < tail.warnings.size() ? count - 1 : count;
  auto warnings = root.initWarnings(static_cast<unsigned>(count));
  for (unsigned i = 0; i < kept; ++i) {
    warnings.set(i, bounded_text(tail.warnings[i], kMaxTailWarningBytes));
  }
  if (kept < count) {
    warnings.set(static_cast<unsigned>(kept),
                 "[... " + std::to_string(tail.warnings.size() - kept) + " warnings cut]");
  }
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

std::expected<ChildTail, Status> decode_tail(std::string_view bytes) {
  if (bytes.empty())
    return failure(ErrorCode::invalid_argument, std::string("the child wrote no tail"));
  if (bytes.size() % sizeof(capnp::word) != 0) {
    return failure(ErrorCode::invalid_argument, "the tail is truncated (" +
                                                    std::to_string(bytes.size()) +
                                                    " bytes, not a whole number of words)");
  }
  // Copy into word-aligned memory: the bytes came from a pipe into a string.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 1 << 20;
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end()) {
      return failure(ErrorCode::invalid_argument,
                     std::string("the tail has bytes after its message"));
    }
    auto root = reader.getRoot<schema::TrialTail>();
    auto outcome = outcome_from_ordinal(std::to_underlying(root.getOutcome()));
    auto net = net_from_ordinal(std::to_underlying(root.getNet()));
    if (!outcome)
      return failure(ErrorCode::invalid_argument, std::string("the tail names an unknown outcome"));
    if (!net)
      return failure(ErrorCode::invalid_argument, std::string("the tail names an unknown net"));
    ChildTail tail;
    tail.outcome = *outcome;
    tail.net = *net;
    tail.events_appended = root.getEventsAppended();
    tail.behavior_failures = root.getBehaviorFailures();
    tail.last_seq = root.getLastSeq();
    tail.detail = sanitize_utf8(text_of(root.getDetail()));
    for (auto warning : root.getWarnings())
      tail.warnings.push_back(sanitize_utf8(text_of(warning)));
    return tail;
  } catch (const kj::Exception& e) {
    return failure(ErrorCode::invalid_argument,
                   "the tail is not a valid message: " + std::string(e.getDescription().cStr()));
  }
}

}  // namespace forktrial::sandbox
