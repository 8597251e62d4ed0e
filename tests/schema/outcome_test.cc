// Outcome and Net (schema/outcome.h) against the Cap'n Proto enums of
// schema/trial.capnp, read through the schema's reflection: the same members,
// with the same ordinals and names, so that a value crosses the wire as a cast.
#include "schema/outcome.h"

#include <capnp/schema.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdint>
#include <string>

#include "schema/trial.capnp.h"

namespace {

using namespace forktrial;

// "limitsExceeded" -> "limits_exceeded": how an enumerant of the schema is
// spelled in forktrial's names.
std::string snake_case(std::string_view camel) {
  std::string out;
  for (char c : camel) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

template <typename Wire, typename Ours, typename NameOf, typename FromOrdinal>
void check_same_set(const auto& ours, NameOf name_of, FromOrdinal from_ordinal) {
  const auto enumerants = capnp::Schema::from<Wire>().getEnumerants();
  REQUIRE(enumerants.size() == ours.size());
  for (auto enumerant : enumerants) {
    const std::string wire_name = enumerant.getProto().getName().cStr();
    INFO(wire_name);
    const std::optional<Ours> value = from_ordinal(enumerant.getOrdinal());
    REQUIRE(value);
    CHECK(name_of(*value) == snake_case(wire_name));
  }
  CHECK_FALSE(from_ordinal(static_cast<std::uint16_t>(ours.size())));
  CHECK_FALSE(from_ordinal(UINT16_MAX));
}

}  // namespace

TEST_CASE("Outcome has the members, ordinals and names of schema::TrialOutcome",
          "[schema][outcome]") {
  check_same_set<schema::TrialOutcome, Outcome>(kOutcomes, outcome_name, outcome_from_ordinal);
}

TEST_CASE("Net has the members, ordinals and names of schema::Net", "[schema][outcome]") {
  check_same_set<schema::Net, Net>(kNets, net_name, net_from_ordinal);
}

TEST_CASE("every outcome and net name reads back as itself, and other names are refused",
          "[schema][outcome]") {
  for (Outcome o : kOutcomes) CHECK(outcome_from_name(outcome_name(o)) == o);
  for (Net n : kNets) CHECK(net_from_name(net_name(n)) == n);
  CHECK(outcome_from_name("limits_exceeded") == Outcome::limits_exceeded);
  CHECK(net_from_name("wall_clock") == Net::wall_clock);
  for (const char* bad : {"", "ok", "Completed", "limitsExceeded", "completed "}) {
    INFO(bad);
    CHECK_FALSE(outcome_from_name(bad));
    CHECK_FALSE(net_from_name(bad));
  }
}
