#include "sandbox/tail.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/text.h"
#include "schema/trial.capnp.h"

namespace forktrial::sandbox {
namespace {

schema::TrialOutcome to_schema(Outcome outcome) {
  switch (outcome) {
    case Outcome::completed:
      return schema::TrialOutcome::COMPLETED;
    case Outcome::scenario_failed:
      return schema::TrialOutcome::SCENARIO_FAILED;
    case Outcome::limits_exceeded:
      return schema::TrialOutcome::LIMITS_EXCEEDED;
    case Outcome::materialization_failed:
      return schema::TrialOutcome::MATERIALIZATION_FAILED;
    case Outcome::crashed:
      break;
  }
  return schema::TrialOutcome::CRASHED;
}

std::optional<Outcome> from_schema(schema::TrialOutcome outcome) {
  switch (outcome) {
    case schema::TrialOutcome::COMPLETED:
      return Outcome::completed;
    case schema::TrialOutcome::SCENARIO_FAILED:
      return Outcome::scenario_failed;
    case schema::TrialOutcome::LIMITS_EXCEEDED:
      return Outcome::limits_exceeded;
    case schema::TrialOutcome::MATERIALIZATION_FAILED:
      return Outcome::materialization_failed;
    case schema::TrialOutcome::CRASHED:
      return Outcome::crashed;
  }
  return std::nullopt;
}

schema::Net to_schema(Net net) {
  switch (net) {
    case Net::none:
      return schema::Net::NONE;
    case Net::event_budget:
      return schema::Net::EVENT_BUDGET;
    case Net::memory:
      return schema::Net::MEMORY;
    case Net::cpu:
      return schema::Net::CPU;
    case Net::wall_clock:
      return schema::Net::WALL_CLOCK;
    case Net::write_budget:
      return schema::Net::WRITE_BUDGET;
  }
  return schema::Net::NONE;
}

std::optional<Net> from_schema(schema::Net net) {
  switch (net) {
    case schema::Net::NONE:
      return Net::none;
    case schema::Net::EVENT_BUDGET:
      return Net::event_budget;
    case schema::Net::MEMORY:
      return Net::memory;
    case schema::Net::CPU:
      return Net::cpu;
    case schema::Net::WALL_CLOCK:
      return Net::wall_clock;
    case schema::Net::WRITE_BUDGET:
      return Net::write_budget;
  }
  return std::nullopt;
}

std::string_view text_of(capnp::Text::Reader text) {
  return std::string_view(text.begin(), text.size());
}

}  // namespace

std::string_view net_name(Net net) {
  switch (net) {
    case Net::none:
      return "none";
    case Net::event_budget:
      return "event budget";
    case Net::memory:
      return "memory";
    case Net::cpu:
      return "CPU";
    case Net::wall_clock:
      return "wall clock";
    case Net::write_budget:
      return "write budget";
  }
  return "none";
}

std::string encode_tail(const ChildTail& tail) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::TrialTail>();
  root.setOutcome(to_schema(tail.outcome));
  root.setNet(to_schema(tail.net));
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

std::expected<ChildTail, std::string> decode_tail(std::string_view bytes) {
  if (bytes.empty()) return std::unexpected(std::string("the child wrote no tail"));
  if (bytes.size() % sizeof(capnp::word) != 0) {
    return std::unexpected("the tail is truncated (" + std::to_string(bytes.size()) +
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
      return std::unexpected(std::string("the tail has bytes after its message"));
    }
    auto root = reader.getRoot<schema::TrialTail>();
    auto outcome = from_schema(root.getOutcome());
    auto net = from_schema(root.getNet());
    if (!outcome) return std::unexpected(std::string("the tail names an unknown outcome"));
    if (!net) return std::unexpected(std::string("the tail names an unknown net"));
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
    return std::unexpected("the tail is not a valid message: " +
                           std::string(e.getDescription().cStr()));
  }
}

}  // namespace forktrial::sandbox
