// A stand-in for a trial child that reports what the parent gave it, for the
// sandbox tests.
//
//   child_probe            lists the descriptors it holds, one "<fd> <target>"
//                          line each in ascending order, to the file named by
//                          FORKTRIAL_PROBE_FDS (else stdout), then exits 0.
//                          Run as a trial child it ignores its job.
//   child_probe hold MIB   writes to MIB MiB of memory (so that its death takes
//                          a while to tear down), then waits to be killed.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace {

// Keeps the memory written by `hold` reachable, so the writes stay.
char* volatile held_memory = nullptr;

// Every descriptor held, with its readlink target, except the one that reads
// the listing itself.
std::map<int, std::string> held_descriptors() {
  std::map<int, std::string> held;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    std::perror("child_probe: opendir(/proc/self/fd)");
    std::exit(2);
  }
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == ::dirfd(dir)) continue;
    char target[4096];
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    held[fd] = n < 0 ? std::string("?") : std::string(target, static_cast<std::size_t>(n));
  }
  ::closedir(dir);
  return held;
}

int report_descriptors() {
  const auto held = held_descriptors();
  const char* path = std::getenv("FORKTRIAL_PROBE_FDS");
  std::FILE* out = path != nullptr ? std::fopen(path, "we") : stdout;
  if (out == nullptr) {
    std::perror("child_probe: fopen(FORKTRIAL_PROBE_FDS)");
    return 2;
  }
  for (const auto& [fd, target] : held) std::fprintf(out, "%d %s\n", fd, target.c_str());
  return std::fclose(out) == 0 ? 0 : 2;
}

[[noreturn]] void hold_memory(std::size_t mib) {
  const std::size_t size = mib << 20;
  auto* bytes = static_cast<char*>(std::malloc(size));
  if (bytes == nullptr) std::exit(2);
  std::memset(bytes, 0x5a, size);
  held_memory = bytes;
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "hold") == 0) {
    hold_memory(std::strtoul(argv[2], nullptr, 10));
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: child_probe [hold MIB]\n");
    return 2;
  }
  return report_descriptors();
}
