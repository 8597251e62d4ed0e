// The world a component sees: its clocks, its randomness and the free space
// of its disk, through one seam. The coordinator and the worker read these
// only through a World (tests/layering/world_seam_test.cc refuses a direct
// call in coordinator/ and worker/), so that the code a daemon runs is the
// code a deterministic simulation or a virtual-time test runs: the daemon
// gives them real_world(), a simulation a VirtualWorld it moves itself.
//
// Thread-safety: real_world() may be used from any thread. A VirtualWorld
// is not thread-safe: one owner drives it and the code it is handed to.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace forktrial {

class World {
 public:
  virtual ~World() = default;

  // The wall clock: what timestamps, lease expiries and records say.
  virtual std::chrono::system_clock::time_point wall_now() = 0;
  // The monotonic clock: what waits, windows and latencies are measured by.
  virtual std::chrono::steady_clock::time_point monotonic_now() = 0;
  // 64 random bits (job ids, submission tokens, incarnations). Not for
  // keys: those come from libsodium.
  virtual std::uint64_t random64() = 0;
  // The bytes an unprivileged writer may still write on the filesystem
  // holding `path`; nullopt when it cannot be told.
  virtual std::optional<std::uint64_t> free_bytes(const std::filesystem::path& path) = 0;
  // The size of the filesystem holding `path`; nullopt when it cannot be told.
  virtual std::optional<std::uint64_t> disk_bytes(const std::filesystem::path& path) = 0;
  // Why a write to the filesystem holding `path` fails now as a full disk
  // fails it, or nullopt. The real world says nullopt: a real disk tells a
  // writer so itself. A store a component writes through its world asks
  // before each commit (store::StoreOptions::before_commit).
  virtual std::optional<std::string> write_refused(const std::filesystem::path& path) = 0;
};

// The machine's clocks, std::random_device and statvfs(3).
World& real_world();

// A world whose time moves only when told and whose randomness is a seeded
// sequence: the same seed and the same calls give the same answers. Its
// disk fills when told (set_free_bytes to 0), and writes then fail.
class VirtualWorld final : public World {
 public:
  // Both clocks start at `wall` (the monotonic one at the same count since
  // its epoch), randomness from `seed`; every path has `free` bytes.
  explicit VirtualWorld(std::uint64_t seed,
                        std::chrono::system_clock::time_point wall =
                            std::chrono::system_clock::time_point(std::chrono::hours(24 * 20'000)),
                        std::uint64_t free = std::uint64_t{1} << 40);

  std::chrono::system_clock::time_point wall_now() override { return wall_; }
  std::chrono::steady_clock::time_point monotonic_now() override { return monotonic_; }
  std::uint64_t random64() override;
  std::optional<std::uint64_t> free_bytes(const std::filesystem::path& path) override;
  // What set_disk_bytes set for the longest path `path` is under; nullopt
  // elsewhere (a disk that cannot tell its size).
  std::optional<std::uint64_t> disk_bytes(const std::filesystem::path& path) override;
  // A write is refused where free_bytes says 0: the disk is full.
  std::optional<std::string> write_refused(const std::filesystem::path& path) override;

  // Moves both clocks forward by `step` (never back).
  void advance(std::chrono::nanoseconds step);
  // Sets the wall clock alone (a clock that jumps, as NTP may make it).
  void set_wall(std::chrono::system_clock::time_point wall) { wall_ = wall; }
  // The free bytes every path under `path` has from now on (the most
  // specific path set wins); nullopt: cannot be told.
  void set_free_bytes(const std::filesystem::path& path, std::optional<std::uint64_t> free);
  // The size of the disk holding every path under `path` from now on.
  void set_disk_bytes(const std::filesystem::path& path, std::optional<std::uint64_t> size);

 private:
  std::chrono::system_clock::time_point wall_;
  std::chrono::steady_clock::time_point monotonic_;
  std::uint64_t state_;
  std::optional<std::uint64_t> free_;
  std::map<std::filesystem::path, std::optional<std::uint64_t>> free_by_path_;
  std::map<std::filesystem::path, std::optional<std::uint64_t>> size_by_path_;
};

}  // namespace forktrial
