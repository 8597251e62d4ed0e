#include "store/ids.h"

#include <catch2/catch.hpp>
#include <limits>

namespace forktrial::store {
namespace {

TEST_CASE("numbered event ids are zero-padded to three digits, then grow", "[store][ids]") {
  CHECK(numbered_event_id(0).str() == "evt_000");
  CHECK(numbered_event_id(7).str() == "evt_007");
  CHECK(numbered_event_id(999).str() == "evt_999");
  CHECK(numbered_event_id(1234).str() == "evt_1234");
  CHECK(numbered_event_id(std::numeric_limits<std::uint64_t>::max()).str() ==
        "evt_18446744073709551615");
}

}  // namespace
}  // namespace forktrial::store
