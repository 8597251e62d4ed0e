#include "coordinator/store_disk.h"

#include <cstdio>
#include <system_error>

namespace forktrial::coordinator {
namespace {

// `bytes` for a person: "512.0 MiB (536870912 bytes)".
std::string size_text(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " bytes";
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.1f %s", value, kUnits[unit]);
  return std::string(shown) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

std::uint64_t store_file_bytes(const std::filesystem::path& store) {
  std::error_code error;
  const auto size = std::filesystem::file_size(store / "data.mdb", error);
  return error ? 0 : size;
}

std::optional<std::string> disk_warning(const StoreDisk& disk, const std::filesystem::path& store) {
  const std::string fix =
      ": free space on that disk, or move the store to a larger one, before it fills (a full "
      "store pauses the coordinator: it leases nothing and takes no job until there is room)";
  if (disk.free_bytes && *disk.free_bytes < kLowFreeBytes) {
    return "the disk holding the store " + store.string() + " has " + size_text(*disk.free_bytes) +
           " free, under " + size_text(kLowFreeBytes) + fix;
  }
  if (disk.free_bytes && disk.disk_bytes &&
      *disk.free_bytes < *disk.disk_bytes / 100 * kLowFreePercentOfDisk) {
    return "the disk holding the store " + store.string() + " has " + size_text(*disk.free_bytes) +
           " free, under " + std::to_string(kLowFreePercentOfDisk) + "% of its " +
           size_text(*disk.disk_bytes) + fix;
  }
  if (disk.free_bytes && *disk.free_bytes < disk.store_bytes / kFreeShareOfStore) {
    return "the disk holding the store " + store.string() + " has " + size_text(*disk.free_bytes) +
           " free, under a tenth of the store's " + size_text(disk.store_bytes) + fix;
  }
  if (disk.map_limit_bytes > 0 &&
      disk.store_bytes >= disk.map_limit_bytes / 100 * kMapLimitWarnPercent) {
    return "the store " + store.string() + " holds " + size_text(disk.store_bytes) + ", past " +
           std::to_string(kMapLimitWarnPercent) + "% of the " + size_text(disk.map_limit_bytes) +
           " its map may grow to, where its writes are refused as a full store's: give new "
           "batches a coordinator with a store of their own";
  }
  return std::nullopt;
}

}  // namespace forktrial::coordinator
