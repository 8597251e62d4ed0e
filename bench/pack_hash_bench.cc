// Pack hashing against the coreutils baselines, measured in the same run:
//
//   1. one large file: bundle_hash throughput vs `sha256sum FILE`
//      (target: forktrial >= 0.9 x sha256sum);
//   2. many small files: bundle_hash time vs
//      `sh -c 'cd DIR && find . -type f | sort | xargs cat | sha256sum'`
//      (target: forktrial <= 1.5 x the pipeline), i.e. the walk is not the
//      bottleneck.
//
// Every measurement is taken on a warm page cache (one untimed run first) and
// the median of --runs runs is reported. The trees live in a temporary
// directory under --dir (default $TMPDIR or /tmp), removed on exit.
//
// Usage: pack_hash_bench [--large-mib N] [--small-files N] [--small-kib N]
//                        [--files-per-dir N] [--runs N] [--dir PATH]
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "pack/bundle_hash.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Options {
  std::uint64_t large_mib = 1024;
  std::uint64_t small_files = 10000;
  std::uint64_t small_kib = 4;
  std::uint64_t files_per_dir = 100;
  int runs = 3;
  fs::path parent;
};

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr,
               "pack_hash_bench: %s\n"
               "usage: pack_hash_bench [--large-mib N] [--small-files N] [--small-kib N]\n"
               "                       [--files-per-dir N] [--runs N] [--dir PATH]\n",
               why.c_str());
  std::exit(2);
}

std::uint64_t parse_count(std::string_view flag, std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value == 0) {
    usage_error(std::string(flag) + " needs a positive integer, got \"" + std::string(text) + "\"");
  }
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') {
    options.parent = tmp;
  } else {
    options.parent = "/tmp";
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") usage_error("measures pack hashing against coreutils");
    if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
    const std::string_view value = argv[++i];
    if (flag == "--large-mib") {
      options.large_mib = parse_count(flag, value);
    } else if (flag == "--small-files") {
      options.small_files = parse_count(flag, value);
    } else if (flag == "--small-kib") {
      options.small_kib = parse_count(flag, value);
    } else if (flag == "--files-per-dir") {
      options.files_per_dir = parse_count(flag, value);
    } else if (flag == "--runs") {
      options.runs = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--dir") {
      options.parent = std::string(value);
    } else {
      usage_error("unknown option " + std::string(flag));
    }
  }
  return options;
}

using forktrial::errno_text;

// A scratch directory removed with everything in it when it goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const fs::path& parent) {
    std::string pattern = (parent / "forktrial-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp(" + pattern + "): " + errno_text(errno) +
                               "; pass --dir to use another directory");
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// splitmix64: fast, deterministic, and incompressible enough for hashing.
class Noise {
 public:
  explicit Noise(std::uint64_t seed) : state_(seed) {}
  void fill(char* data, std::size_t size) {
    for (std::size_t i = 0; i < size; i += 8) {
      std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      std::memcpy(data + i, &z, std::min<std::size_t>(8, size - i));
    }
  }

 private:
  std::uint64_t state_;
};

void write_all(int fd, const char* data, std::size_t size, const fs::path& path) {
  while (size > 0) {
    const ssize_t n = forktrial::retry_eintr([&] { return ::write(fd, data, size); });
    if (n < 0) throw std::runtime_error("write(" + path.string() + "): " + errno_text(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void write_noise_file(const fs::path& path, std::uint64_t size, Noise& noise) {
  forktrial::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw std::runtime_error("open(" + path.string() + "): " + errno_text(errno));
  std::vector<char> buffer(std::min<std::uint64_t>(size, 1 << 20));
  while (size > 0) {
    const std::size_t chunk = std::min<std::uint64_t>(size, buffer.size());
    noise.fill(buffer.data(), chunk);
    write_all(fd.get(), buffer.data(), chunk, path);
    size -= chunk;
  }
}

// Reads the file once so the timed runs find it in the page cache.
void warm(const fs::path& path) {
  forktrial::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw std::runtime_error("open(" + path.string() + "): " + errno_text(errno));
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n =
        forktrial::retry_eintr([&] { return ::read(fd.get(), buffer.data(), buffer.size()); });
    if (n < 0) throw std::runtime_error("read(" + path.string() + "): " + errno_text(errno));
    if (n == 0) break;
  }
}

// Runs argv without a shell, stdout to /dev/null, and fails unless it exits 0.
void run_quietly(const std::vector<std::string>& argv) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawnp(" + argv[0] + "): " + errno_text(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid: " + errno_text(errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(argv[0] + " failed with status " + std::to_string(status));
  }
}

void bundle_hash_or_throw(const fs::path& root) {
  const auto digest = forktrial::pack::bundle_hash(root);
  if (!digest) throw std::runtime_error(digest.error().message);
}

// Median wall-clock seconds of `runs` timed calls, after one untimed call.
double median_seconds(int runs, const std::function<void()>& body) {
  body();
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

const char* verdict(bool met) {
  return met ? "PASS" : "MISS target";
}

bool bench_large_file(const Options& options) {
  ScratchDir scratch(options.parent);
  const fs::path root = scratch.path() / "pack";
  fs::create_directory(root);
  const fs::path file = root / "large.bin";
  const std::uint64_t bytes = options.large_mib << 20;
  Noise noise(1);
  write_noise_file(file, bytes, noise);
  warm(file);

  const double forktrial_s = median_seconds(options.runs, [&] { bundle_hash_or_throw(root); });
  const double cli_s = median_seconds(options.runs, [&] {
    run_quietly({FORKTRIAL_BINARY, "pack", "hash", root.string()});
  });
  const double sha256sum_s = median_seconds(options.runs, [&] {
    run_quietly({"sha256sum", file.string()});
  });

  const double mb = static_cast<double>(bytes) / 1e6;
  const double ratio = (mb / forktrial_s) / (mb / sha256sum_s);
  const bool met = ratio >= 0.9;
  std::printf("large file: %llu MiB, one file, median of %d, warm cache\n",
              static_cast<unsigned long long>(options.large_mib), options.runs);
  std::printf("  forktrial bundle_hash       %9.1f MB/s  (%.3f s)\n", mb / forktrial_s,
              forktrial_s);
  std::printf("  forktrial pack hash (CLI)   %9.1f MB/s  (%.3f s, for reference)\n", mb / cli_s,
              cli_s);
  std::printf("  sha256sum FILE              %9.1f MB/s  (%.3f s)\n", mb / sha256sum_s,
              sha256sum_s);
  std::printf("  throughput ratio forktrial/sha256sum = %.2f (target >= 0.90)  %s\n", ratio,
              verdict(met));
  return met;
}

bool bench_small_files(const Options& options) {
  ScratchDir scratch(options.parent);
  const fs::path root = scratch.path() / "pack";
  const std::uint64_t size = options.small_kib << 10;
  std::vector<char> buffer(size);
  Noise noise(2);
  for (std::uint64_t i = 0; i < options.small_files; ++i) {
    char dir_name[32];
    char file_name[32];
    std::snprintf(dir_name, sizeof dir_name, "d%04llu",
                  static_cast<unsigned long long>(i / options.files_per_dir));
    std::snprintf(file_name, sizeof file_name, "f%04llu.lua",
                  static_cast<unsigned long long>(i % options.files_per_dir));
    const fs::path dir = root / dir_name;
    if (i % options.files_per_dir == 0) fs::create_directories(dir);
    write_noise_file(dir / file_name, size, noise);
  }
  const std::string pipeline =
      "cd '" + root.string() + "' && find . -type f | sort | xargs cat | sha256sum";

  const double forktrial_s = median_seconds(options.runs, [&] { bundle_hash_or_throw(root); });
  const double cli_s = median_seconds(options.runs, [&] {
    run_quietly({FORKTRIAL_BINARY, "pack", "hash", root.string()});
  });
  const double baseline_s = median_seconds(options.runs, [&] {
    run_quietly({"sh", "-c", pipeline});
  });

  const double ratio = forktrial_s / baseline_s;
  const bool met = ratio <= 1.5;
  std::printf("small files: %llu files of %llu KiB in %llu directories, median of %d, warm cache\n",
              static_cast<unsigned long long>(options.small_files),
              static_cast<unsigned long long>(options.small_kib),
              static_cast<unsigned long long>((options.small_files + options.files_per_dir - 1) /
                                              options.files_per_dir),
              options.runs);
  std::printf("  forktrial bundle_hash                     %8.3f s\n", forktrial_s);
  std::printf("  forktrial pack hash (CLI)                 %8.3f s  (for reference)\n", cli_s);
  std::printf("  find | sort | xargs cat | sha256sum       %8.3f s\n", baseline_s);
  std::printf("  time ratio forktrial/pipeline = %.2f (target <= 1.50)  %s\n", ratio, verdict(met));
  return met;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    bool all_met = bench_large_file(options);
    std::fflush(stdout);
    all_met = bench_small_files(options) && all_met;
    return all_met ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pack_hash_bench: %s\n", e.what());
    return 2;
  }
}
