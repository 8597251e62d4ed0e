// Test support: a small tmpfs mounted for one test, to fill a disk for real.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "tests/support/temp_dir.h"

namespace forktrial::testing {

// A tmpfs of `size` (mount's size=, e.g. "64m") mounted at `path`, unmounted
// (lazily) when it goes.
class SmallDisk {
 public:
  // Why a tmpfs cannot be mounted here, or nullopt when it can be tried.
  static std::optional<std::string> unavailable() {
    if (::geteuid() != 0) return "not root: mounting a small tmpfs needs CAP_SYS_ADMIN";
    return std::nullopt;
  }
  SmallDisk(const std::filesystem::path& path, const std::string& size) : path_(path) {
    std::filesystem::create_directories(path);
    mounted_ = quietly({"mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path.string()});
  }
  ~SmallDisk() {
    if (mounted_) quietly({"umount", "-l", path_.string()});
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool mounted() const { return mounted_; }
  const std::filesystem::path& path() const { return path_; }

  // Writes zeros to a file on the disk until it has no room left; false if
  // the file could not be made.
  bool fill() const {
    std::FILE* file = std::fopen((path_ / "filler").c_str(), "w");
    if (file == nullptr) return false;
    const std::string block(1 << 16, '\0');
    while (std::fwrite(block.data(), 1, block.size(), file) == block.size()) {
    }
    std::fclose(file);
    return true;
  }
  void make_room() const { std::filesystem::remove(path_ / "filler"); }

 private:
  static bool quietly(const std::vector<std::string>& argv) {
    return run_command(argv, std::chrono::seconds(30)).exit_code == 0;
  }

  std::filesystem::path path_;
  bool mounted_ = false;
};

}  // namespace forktrial::testing
