#include "transport/process_metrics.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "transport/metrics_endpoint.h"

namespace forktrial::transport {
namespace {

namespace fs = std::filesystem;

constexpr auto kReadEvery = std::chrono::seconds(1);

// The whole of a small /proc file; nullopt when it cannot be opened.
std::optional<std::string> read_small(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<std::uint64_t> number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The `index`th (from 0) space-separated field of `text`.
std::optional<std::string_view> field(std::string_view text, std::size_t index) {
  std::size_t at = 0;
  for (std::size_t i = 0;; ++i) {
    at = text.find_first_not_of(" \n", at);
    if (at == std::string_view::npos) return std::nullopt;
    const std::size_t end = std::min(text.find_first_of(" \n", at), text.size());
    if (i == index) return text.substr(at, end - at);
    at = end;
  }
}

std::optional<std::uint64_t> number_field(std::string_view text, std::size_t index) {
  const auto found = field(text, index);
  return found ? number(*found) : std::nullopt;
}

// Descriptors open in the process: the entries of /proc/self/fd (the one
// that lists them among them, as every client library counts).
std::optional<std::uint64_t> count_entries(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return std::nullopt;
  std::uint64_t count = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return std::nullopt;
    ++count;
  }
  return count;
}

}  // namespace

std::optional<std::uint64_t> start_ticks_of_stat(std::string_view stat) {
  const std::size_t comm_end = stat.rfind(')');
  if (comm_end == std::string_view::npos) return std::nullopt;
  // After the command name: field 3 (state) is the first, 22 (starttime)
  // the 20th.
  return number_field(stat.substr(comm_end + 1), 19);
}

std::optional<std::uint64_t> boot_time_of_proc_stat(std::string_view proc_stat) {
  constexpr std::string_view kKey = "btime ";
  for (std::size_t at = 0; at < proc_stat.size();) {
    const std::size_t end = std::min(proc_stat.find('\n', at), proc_stat.size());
    const std::string_view line = proc_stat.substr(at, end - at);
    if (line.starts_with(kKey)) return number(line.substr(kKey.size()));
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> resident_pages_of_statm(std::string_view statm) {
  if (!field(statm, 6)) return std::nullopt;  // statm has seven fields
  return number_field(statm, 1);
}

ProcessMetrics::ProcessMetrics(prometheus::Registry& registry, std::filesystem::path proc)
    : self_(proc / "self"),
      start_time_(add_gauge(registry, "process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.")),
      resident_(
          add_gauge(registry, "process_resident_memory_bytes", "Resident memory size in bytes.")),
      open_fds_(add_gauge(registry, "process_open_fds", "Number of open file descriptors.")) {
  const auto stat = read_small(self_ / "stat");
  const auto proc_stat = read_small(proc / "stat");
  const auto ticks = stat ? start_ticks_of_stat(*stat) : std::nullopt;
  const auto boot = proc_stat ? boot_time_of_proc_stat(*proc_stat) : std::nullopt;
  const long per_second = ::sysconf(_SC_CLK_TCK);
  if (ticks && boot && per_second > 0) {
    start_time_.Set(static_cast<double>(*boot) +
                    static_cast<double>(*ticks) / static_cast<double>(per_second));
  }
}

void ProcessMetrics::observe(std::chrono::steady_clock::time_point now) {
  if (last_ && now - *last_ < kReadEvery) return;
  last_ = now;
  const auto statm = read_small(self_ / "statm");
  const auto pages = statm ? resident_pages_of_statm(*statm) : std::nullopt;
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages && page_size > 0) {
    resident_.Set(static_cast<double>(*pages) * static_cast<double>(page_size));
  }
  if (const auto fds = count_entries(self_ / "fd")) open_fds_.Set(static_cast<double>(*fds));
}

}  // namespace forktrial::transport
