// A daemon's process metrics, under the names every Prometheus client library
// gives them, so that dashboards and alerts written for any process work on
// the coordinator and the workers alike:
//   process_start_time_seconds     when the process started, in seconds since
//                                  the Unix epoch (the kernel's boot time plus
//                                  the process's start in clock ticks)
//   process_resident_memory_bytes  its resident set (/proc/self/statm)
//   process_open_fds               its open descriptors (/proc/self/fd)
// They are read from Linux's /proc/self, never from a clock: the caller says
// what time it is (its World's monotonic clock), and the files are read at
// most once a second, however often it asks.
//
// A file that cannot be read or parsed leaves its gauge where it was (at 0
// before any reading); the reading is tried again a second later. Nothing
// throws once constructed.
//
// Thread-safety: observe() is for one thread (the daemon's loop). The
// registry may be scraped by other threads meanwhile (prometheus-cpp's gauges
// are atomic).
#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace forktrial::transport {

// The parsers of the /proc files read, each nullopt for text that is not what
// Linux's proc(5) describes.

// The process's start, in clock ticks after boot: field 22 of
// /proc/PID/stat, counted after the `)` that ends its command name (which
// may itself hold spaces and parentheses).
std::optional<std::uint64_t> start_ticks_of_stat(std::string_view stat);
// The boot time, in seconds since the epoch: the `btime` line of /proc/stat.
std::optional<std::uint64_t> boot_time_of_proc_stat(std::string_view proc_stat);
// The resident set in pages: field 2 of /proc/PID/statm.
std::optional<std::uint64_t> resident_pages_of_statm(std::string_view statm);

class ProcessMetrics {
 public:
  // Adds the three gauges to `registry`, which must outlive this, and reads
  // the start time (it does not change) from `proc` (a /proc of Linux's
  // layout; another one only in tests).
  explicit ProcessMetrics(prometheus::Registry& registry, std::filesystem::path proc = "/proc");

  // Reads the resident set and the open descriptors again, unless the last
  // reading was less than a second before `now`.
  void observe(std::chrono::steady_clock::time_point now);

 private:
  std::filesystem::path self_;
  prometheus::Gauge& start_time_;
  prometheus::Gauge& resident_;
  prometheus::Gauge& open_fds_;
  std::optional<std::chrono::steady_clock::time_point> last_;
};

}  // namespace forktrial::transport
