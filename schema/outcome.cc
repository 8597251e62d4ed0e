#include "schema/outcome.h"

#include <utility>

#include "schema/trial.capnp.h"

namespace forktrial {
namespace {

// Each enumerator has the ordinal of the Cap'n Proto enumerant of the same
// name. (That the Cap'n Proto enums have no further enumerants is checked by
// tests/schema/outcome_test.cc, through the schema's reflection.)
#define FORKTRIAL_SAME_ORDINAL(ours, theirs) \
  static_assert(std::to_underlying(ours) == std::to_underlying(theirs), #ours " and " #theirs)
FORKTRIAL_SAME_ORDINAL(Outcome::completed, schema::TrialOutcome::COMPLETED);
FORKTRIAL_SAME_ORDINAL(Outcome::scenario_failed, schema::TrialOutcome::SCENARIO_FAILED);
FORKTRIAL_SAME_ORDINAL(Outcome::limits_exceeded, schema::TrialOutcome::LIMITS_EXCEEDED);
FORKTRIAL_SAME_ORDINAL(Outcome::materialization_failed,
                       schema::TrialOutcome::MATERIALIZATION_FAILED);
FORKTRIAL_SAME_ORDINAL(Outcome::crashed, schema::TrialOutcome::CRASHED);
FORKTRIAL_SAME_ORDINAL(Net::none, schema::Net::NONE);
FORKTRIAL_SAME_ORDINAL(Net::event_budget, schema::Net::EVENT_BUDGET);
FORKTRIAL_SAME_ORDINAL(Net::memory, schema::Net::MEMORY);
FORKTRIAL_SAME_ORDINAL(Net::cpu, schema::Net::CPU);
FORKTRIAL_SAME_ORDINAL(Net::wall_clock, schema::Net::WALL_CLOCK);
FORKTRIAL_SAME_ORDINAL(Net::write_budget, schema::Net::WRITE_BUDGET);
#undef FORKTRIAL_SAME_ORDINAL

// The enumerators are 0..N-1 in the order of their arrays, so an ordinal
// indexes both the array and the names.
constexpr std::array<std::string_view, kOutcomes.size()> kOutcomeNames = {
    "completed", "scenario_failed", "limits_exceeded", "materialization_failed", "crashed"};
constexpr std::array<std::string_view, kNets.size()> kNetNames = {
    "none", "event_budget", "memory", "cpu", "wall_clock", "write_budget"};

template <typename Enum, std::size_t N>
consteval bool dense(const std::array<Enum, N>& values) {
  for (std::size_t i = 0; i < N; ++i) {
    if (std::to_underlying(values[i]) != i) return false;
  }
  return true;
}
static_assert(dense(kOutcomes));
static_assert(dense(kNets));

template <typename Enum, std::size_t N>
std::optional<Enum> from_name(const std::array<Enum, N>& values,
                              const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return values[i];
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::optional<Enum> from_ordinal(const std::array<Enum, N>& values, std::uint16_t ordinal) {
  if (ordinal >= N) return std::nullopt;
  return values[ordinal];
}

}  // namespace

std::string_view outcome_name(Outcome outcome) {
  const auto i = std::to_underlying(outcome);
  return i < kOutcomeNames.size() ? kOutcomeNames[i] : "unknown";
}

std::optional<Outcome> outcome_from_name(std::string_view name) {
  return from_name(kOutcomes, kOutcomeNames, name);
}

std::optional<Outcome> outcome_from_ordinal(std::uint16_t ordinal) {
  return from_ordinal(kOutcomes, ordinal);
}

std::string_view net_name(Net net) {
  const auto i = std::to_underlying(net);
  return i < kNetNames.size() ? kNetNames[i] : "unknown";
}

std::optional<Net> net_from_name(std::string_view name) {
  return from_name(kNets, kNetNames, name);
}

std::optional<Net> net_from_ordinal(std::uint16_t ordinal) {
  return from_ordinal(kNets, ordinal);
}

}  // namespace forktrial
