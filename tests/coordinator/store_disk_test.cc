// When the coordinator warns that its store's disk is nearly full: each rule
// of coordinator/store_disk.h at its edge, with the values its text says.
#include "coordinator/store_disk.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace forktrial::coordinator {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
const std::filesystem::path kStore = "/data/store";

StoreDisk roomy() {
  return StoreDisk{100 * kGiB, 2 * kGiB, 4 * kGiB, 1024 * kGiB};
}

TEST_CASE("a store with room on its disk and in its map is not warned of",
          "[coordinator][status]") {
  CHECK_FALSE(disk_warning(roomy(), kStore));
  StoreDisk edge = roomy();
  edge.free_bytes = kLowFreeBytes;  // exactly 1 GiB free: not under it
  CHECK_FALSE(disk_warning(edge, kStore));
  // A store near its map now is normal: the map doubles when it must.
  StoreDisk near_map = roomy();
  near_map.store_bytes = near_map.map_bytes;
  CHECK_FALSE(disk_warning(near_map, kStore));
}

TEST_CASE("a disk with under 1 GiB free is warned of, with its free space and the fix",
          "[coordinator][status]") {
  StoreDisk disk = roomy();
  disk.free_bytes = kLowFreeBytes - 1;
  const auto warning = disk_warning(disk, kStore);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::StartsWith("the disk holding the store /data/store has 1024.0 MiB "
                                         "(1073741823 bytes) free, under 1.0 GiB (1073741824 "
                                         "bytes): free space on that disk, or move the store"));
  CHECK_THAT(*warning, Catch::Contains("a full store pauses the coordinator"));
  disk.free_bytes = 0;
  CHECK_THAT(*disk_warning(disk, kStore), Catch::Contains("has 0 bytes free"));
}

TEST_CASE("a disk with less free than a tenth of the store's size is warned of",
          "[coordinator][status]") {
  StoreDisk disk = roomy();
  disk.store_bytes = 200 * kGiB;
  disk.free_bytes = 20 * kGiB;  // a tenth exactly: not under it
  CHECK_FALSE(disk_warning(disk, kStore));
  disk.free_bytes = 20 * kGiB - 1;
  const auto warning = disk_warning(disk, kStore);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::Contains("free, under a tenth of the store's 200.0 GiB "
                                       "(214748364800 bytes)"));
}

TEST_CASE("a disk with under a tenth of its size free is warned of", "[coordinator][status]") {
  StoreDisk disk = roomy();
  disk.free_bytes = 100 * kGiB;
  disk.disk_bytes = 1000 * kGiB;  // a tenth exactly: not under it
  CHECK_FALSE(disk_warning(disk, kStore));
  disk.free_bytes = 100 * kGiB - 1;
  const auto warning = disk_warning(disk, kStore);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::Contains("free, under 10% of its 1000.0 GiB") &&
                           Catch::Contains("free space on that disk"));
  // A disk that cannot tell its size: that rule does not apply.
  disk.disk_bytes = std::nullopt;
  CHECK_FALSE(disk_warning(disk, kStore));
}

TEST_CASE("a store past 90% of its map's limit is warned of", "[coordinator][status]") {
  StoreDisk disk{std::uint64_t{10} << 40, 0, 512 * kGiB, 1000 * kGiB};
  disk.store_bytes = 900 * kGiB - 1;
  CHECK_FALSE(disk_warning(disk, kStore));
  disk.store_bytes = 900 * kGiB;
  const auto warning = disk_warning(disk, kStore);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::StartsWith("the store /data/store holds 900.0 GiB (966367641600 "
                                         "bytes), past 90% of the 1000.0 GiB (1073741824000 "
                                         "bytes) its map may grow to"));
}

TEST_CASE("a disk that cannot tell its free space is warned of only by the map's limit",
          "[coordinator][status]") {
  StoreDisk disk = roomy();
  disk.free_bytes = std::nullopt;
  CHECK_FALSE(disk_warning(disk, kStore));
  disk.store_bytes = disk.map_limit_bytes;
  CHECK(disk_warning(disk, kStore));
}

TEST_CASE("the store's size on disk is its data file's, 0 without one", "[coordinator][status]") {
  forktrial::testing::TempDir dir;
  CHECK(store_file_bytes(dir.path()) == 0);
  std::ofstream(dir.path() / "data.mdb") << std::string(12'345, 'x');
  std::ofstream(dir.path() / "lock.mdb") << std::string(100, 'x');
  CHECK(store_file_bytes(dir.path()) == 12'345);
}

}  // namespace
}  // namespace forktrial::coordinator
