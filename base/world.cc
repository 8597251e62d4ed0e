#include "base/world.h"

#include <sys/statvfs.h>

#include <mutex>
#include <random>

namespace forktrial {
namespace {

class RealWorld final : public World {
 public:
  std::chrono::system_clock::time_point wall_now() override {
    return std::chrono::system_clock::now();
  }
  std::chrono::steady_clock::time_point monotonic_now() override {
    return std::chrono::steady_clock::now();
  }
  std::uint64_t random64() override {
    const std::lock_guard lock(mutex_);
    return std::uint64_t{device_()} << 32 | device_();
  }
  std::optional<std::uint64_t> free_bytes(const std::filesystem::path& path) override {
    struct statvfs disk {};
    if (::statvfs(path.c_str(), &disk) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(disk.f_bavail) * disk.f_frsize;
  }
  std::optional<std::uint64_t> disk_bytes(const std::filesystem::path& path) override {
    struct statvfs disk {};
    if (::statvfs(path.c_str(), &disk) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(disk.f_blocks) * disk.f_frsize;
  }
  std::optional<std::string> write_refused(const std::filesystem::path&) override {
    return std::nullopt;
  }

 private:
  std::mutex mutex_;  // std::random_device is not safe to share
  std::random_device device_;
};

// SplitMix64: a full-period sequence, good enough for ids and schedules.
std::uint64_t split_mix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

World& real_world() {
  static RealWorld world;
  return world;
}

VirtualWorld::VirtualWorld(std::uint64_t seed, std::chrono::system_clock::time_point wall,
                           std::uint64_t free)
    : wall_(wall),
      monotonic_(std::chrono::steady_clock::time_point(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              wall.time_since_epoch()))),
      state_(seed),
      free_(free) {}

std::uint64_t VirtualWorld::random64() {
  return split_mix(state_);
}

void VirtualWorld::advance(std::chrono::nanoseconds step) {
  if (step.count() <= 0) return;
  wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(step);
  monotonic_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(step);
}

void VirtualWorld::set_free_bytes(const std::filesystem::path& path,
                                  std::optional<std::uint64_t> free) {
  free_by_path_[path.lexically_normal()] = free;
}

namespace {

// The value set for the longest path that `path` is under, if any.
const std::optional<std::uint64_t>* set_for(
    const std::map<std::filesystem::path, std::optional<std::uint64_t>>& by_path,
    const std::filesystem::path& path) {
  std::filesystem::path at = path.lexically_normal();
  for (;;) {
    if (auto found = by_path.find(at); found != by_path.end()) return &found->second;
    if (!at.has_relative_path()) break;
    const std::filesystem::path parent = at.parent_path();
    if (parent == at) break;
    at = parent;
  }
  return nullptr;
}

}  // namespace

std::optional<std::uint64_t> VirtualWorld::free_bytes(const std::filesystem::path& path) {
  const auto* set = set_for(free_by_path_, path);
  return set != nullptr ? *set : free_;
}

std::optional<std::uint64_t> VirtualWorld::disk_bytes(const std::filesystem::path& path) {
  const auto* set = set_for(size_by_path_, path);
  return set != nullptr ? *set : std::nullopt;
}

void VirtualWorld::set_disk_bytes(const std::filesystem::path& path,
                                  std::optional<std::uint64_t> size) {
  size_by_path_[path.lexically_normal()] = size;
}

std::optional<std::string> VirtualWorld::write_refused(const std::filesystem::path& path) {
  if (free_bytes(path) != std::uint64_t{0}) return std::nullopt;
  return "no space left on the device holding " + path.string() + " (the world's disk is full)";
}

}  // namespace forktrial
