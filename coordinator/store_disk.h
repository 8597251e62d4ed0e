// The room the coordinator's store has: the free space of the disk holding
// it, the size of its data file, and its LMDB map, with the warning an
// operator should see before the disk fills (a full store pauses the
// coordinator: docs/cluster.md, "Faults").
//
// The map is not a limit by itself: the store doubles it when a write needs
// more room (store/event_store.h, "The map"), up to its limit
// (StoreOptions::max_map_size), so a store near its map is normal and only a
// store near the map's limit is warned of.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace forktrial::coordinator {

struct StoreDisk {
  // Bytes the store may still write on its disk (World::free_bytes); nullopt
  // when the disk cannot tell.
  std::optional<std::uint64_t> free_bytes;
  std::uint64_t store_bytes = 0;      // its data file on disk
  std::uint64_t map_bytes = 0;        // its LMDB map now
  std::uint64_t map_limit_bytes = 0;  // the most the map grows to
  // The size of that disk (World::disk_bytes); nullopt when it cannot tell.
  std::optional<std::uint64_t> disk_bytes{};
};

// A disk with less free than this is nearly full, whatever the store's size.
inline constexpr std::uint64_t kLowFreeBytes = std::uint64_t{1} << 30;  // 1 GiB
// ... and so is one with less free than this share of the store's size: a
// store grows by a tenth of itself long before anyone frees space.
inline constexpr std::uint64_t kFreeShareOfStore = 10;  // 1/10
// ... and so is one with less free than this share of its size (percent).
inline constexpr std::uint64_t kLowFreePercentOfDisk = 10;
// A store past this share of its map's limit (percent) may not grow further.
inline constexpr std::uint64_t kMapLimitWarnPercent = 90;

// The size of the data file of the store in directory `store`
// (docs/store-format.md: `data.mdb`); 0 when it cannot be read.
std::uint64_t store_file_bytes(const std::filesystem::path& store);

// Why the store in directory `store` is nearly out of room, with the values
// and what to do; nullopt while it has room.
std::optional<std::string> disk_warning(const StoreDisk& disk, const std::filesystem::path& store);

}  // namespace forktrial::coordinator
