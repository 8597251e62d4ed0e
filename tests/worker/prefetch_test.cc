// How many assignments a worker holds beyond its slots.
#include <catch2/catch.hpp>

#include "worker/session.h"

using forktrial::worker::prefetch_wanted;

TEST_CASE("prefetch 0 holds nothing beyond the slots, however short the trials",
          "[worker][prefetch]") {
  CHECK(prefetch_wanted(0, 1, 0) == 0);
  CHECK(prefetch_wanted(0, 8, 100) == 0);
}

TEST_CASE("a worker that has timed no trial holds one beyond its slots", "[worker][prefetch]") {
  CHECK(prefetch_wanted(4, 1, 0) == 1);
  CHECK(prefetch_wanted(64, 8, 0) == 1);
}

TEST_CASE("short trials fill the prefetch up to its cap, long ones want one ready",
          "[worker][prefetch]") {
  // 50 ms of 3.5 ms trials on one slot is 15 trials: the cap of 4 holds.
  CHECK(prefetch_wanted(4, 1, 3'500) == 4);
  // 50 ms of 20 ms trials on one slot: 3 (2.5 rounded up).
  CHECK(prefetch_wanted(4, 1, 20'000) == 3);
  // Eight slots get through eight times as many.
  CHECK(prefetch_wanted(64, 8, 10'000) == 40);
  // A second per trial: one ready, no more.
  CHECK(prefetch_wanted(4, 1, 1'000'000) == 1);
  CHECK(prefetch_wanted(1024, 64, 60'000'000) == 1);
}

TEST_CASE("an absurd trial time cannot overflow the prefetch", "[worker][prefetch]") {
  CHECK(prefetch_wanted(1024, 4096, 1e-300) == 1024);
  CHECK(prefetch_wanted(4, 1, -5) == 1);
}
