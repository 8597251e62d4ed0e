// A power loss, for tests: undoes, in one file, every write made since it
// was last flushed, from the undo log tests/support/unsynced_writes.cc kept
// while the process that wrote them ran under LD_PRELOAD. Call it after that
// process was killed, then reopen the file: what remains is what a machine
// that lost power would have found on its disk.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace forktrial::testing {

// Applies the undo log `undo` to `file`, newest write first; returns how
// many writes were dropped.
inline std::size_t drop_unsynced_writes(const std::filesystem::path& file,
                                        const std::filesystem::path& undo) {
  std::ifstream in(undo, std::ios::binary);
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  struct Entry {
    std::uint64_t offset, old_size;
    std::string before;
  };
  std::vector<Entry> entries;
  for (std::size_t at = 0; at < log.size();) {
    std::uint64_t header[3];
    REQUIRE(at + sizeof header <= log.size());
    std::memcpy(header, log.data() + at, sizeof header);
    at += sizeof header;
    REQUIRE(at + header[2] <= log.size());
    entries.push_back({header[0], header[1], log.substr(at, header[2])});
    at += header[2];
  }
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (auto e = entries.rbegin(); e != entries.rend(); ++e) {
    REQUIRE(::pwrite(fd, e->before.data(), e->before.size(), static_cast<off_t>(e->offset)) ==
            static_cast<ssize_t>(e->before.size()));
    REQUIRE(::ftruncate(fd, static_cast<off_t>(e->old_size)) == 0);
  }
  REQUIRE(::fsync(fd) == 0);
  ::close(fd);
  std::filesystem::remove(undo);
  return entries.size();
}

}  // namespace forktrial::testing
