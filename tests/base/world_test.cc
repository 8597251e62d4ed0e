// The World seam: a VirtualWorld is as deterministic as its seed and moves
// only when told; the real one reads the machine.
#include "base/world.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <set>

#include "tests/support/temp_dir.h"

namespace forktrial {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a virtual world's time moves only when told, both clocks together", "[base][world]") {
  VirtualWorld world(1);
  const auto wall = world.wall_now();
  const auto monotonic = world.monotonic_now();
  CHECK(world.wall_now() == wall);
  world.advance(1500ms);
  CHECK(world.wall_now() - wall == 1500ms);
  CHECK(world.monotonic_now() - monotonic == 1500ms);
  world.advance(-5s);  // never back
  CHECK(world.monotonic_now() - monotonic == 1500ms);
  // The wall clock may jump alone; the monotonic one does not follow.
  world.set_wall(wall - 1h);
  CHECK(world.wall_now() == wall - 1h);
  CHECK(world.monotonic_now() - monotonic == 1500ms);
}

TEST_CASE("a virtual world's randomness is its seed's", "[base][world]") {
  VirtualWorld a(7), b(7), c(8);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t x = a.random64();
    CHECK(x == b.random64());
    seen.insert(x);
    seen.insert(c.random64());
  }
  CHECK(seen.size() == 2000);
}

TEST_CASE("a virtual world's free space is set per path, the most specific winning",
          "[base][world]") {
  VirtualWorld world(1, std::chrono::system_clock::time_point{}, 1000);
  CHECK(world.free_bytes("/any/where") == 1000u);
  world.set_free_bytes("/data", 10);
  world.set_free_bytes("/data/store", std::nullopt);
  CHECK(world.free_bytes("/data/file") == 10u);
  CHECK(world.free_bytes("/data/store/uploads") == std::nullopt);
  CHECK(world.free_bytes("/data/./store/../x") == 10u);
  CHECK(world.free_bytes("/other") == 1000u);
  // A write is refused where the disk is full, and only there.
  world.set_free_bytes("/full", 0);
  CHECK_THAT(world.write_refused("/full/store").value_or(""), Catch::Contains("full"));
  CHECK_FALSE(world.write_refused("/data/file").has_value());
  CHECK_FALSE(world.write_refused("/data/store").has_value());  // cannot be told: not refused
}

TEST_CASE("the real world reads the machine", "[base][world]") {
  World& world = real_world();
  const auto before = std::chrono::system_clock::now();
  const auto wall = world.wall_now();
  CHECK(wall >= before);
  const auto m1 = world.monotonic_now();
  CHECK(world.monotonic_now() >= m1);
  CHECK(world.random64() != world.random64());
  forktrial::testing::TempDir dir;
  CHECK(world.free_bytes(dir.path()).has_value());
  CHECK_FALSE(world.free_bytes(dir.path() / "missing" / "deeper").has_value());
  CHECK_FALSE(world.write_refused(dir.path()).has_value());
}

}  // namespace
}  // namespace forktrial
