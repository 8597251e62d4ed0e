// How a trial ended, and which net stopped it: the one definition every layer
// uses (the runtime's scenario result, the child's tail, the trial report,
// the command line and the wire).
//
// schema/trial.capnp carries the same two sets as the Cap'n Proto enums
// schema::TrialOutcome and schema::Net. Each enumerator here has the ordinal
// of the Cap'n Proto enumerant of the same name (schema/outcome.cc checks it
// at compile time, tests/schema/outcome_test.cc checks that the sets have the
// same members and names), so crossing the wire is a cast of the ordinal; an
// ordinal read from a message is checked with *_from_ordinal, since a newer or
// hostile writer may send one this build does not know.
//
// Names are the snake_case spelling of the enumerator ("limits_exceeded",
// "event_budget"); they appear in JSON output and are stable.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace forktrial {

enum class Outcome : std::uint16_t {
  completed = 0,
  scenario_failed = 1,         // the scenario raised, or could not be found
  limits_exceeded = 2,         // a net stopped the trial (see Net)
  materialization_failed = 3,  // the fork could not be projected or a pack not loaded
  crashed = 4,                 // the child died or said nothing believable
};
inline constexpr std::array kOutcomes = {Outcome::completed, Outcome::scenario_failed,
                                         Outcome::limits_exceeded, Outcome::materialization_failed,
                                         Outcome::crashed};

std::string_view outcome_name(Outcome outcome);
std::optional<Outcome> outcome_from_name(std::string_view name);
std::optional<Outcome> outcome_from_ordinal(std::uint16_t ordinal);

// The net that stopped a trial whose outcome is limits_exceeded; none
// otherwise.
enum class Net : std::uint16_t {
  none = 0,
  event_budget = 1,  // max_events dispatched events
  memory = 2,        // the Lua allocator cap or RLIMIT_AS
  cpu = 3,           // RLIMIT_CPU
  wall_clock = 4,    // the parent's wall-clock kill
  write_budget = 5,  // max_appended_events or max_appended_bytes
};
inline constexpr std::array kNets = {Net::none, Net::event_budget, Net::memory,
                                     Net::cpu,  Net::wall_clock,   Net::write_budget};

std::string_view net_name(Net net);
std::optional<Net> net_from_name(std::string_view name);
std::optional<Net> net_from_ordinal(std::uint16_t ordinal);

}  // namespace forktrial
