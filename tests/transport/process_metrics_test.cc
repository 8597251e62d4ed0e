// The process metrics: each /proc parser against known text and each way the
// text can be wrong, the gauges against a /proc tree written by hand (values
// computed by hand), the once-a-second reading, and this process's own /proc.
#include "transport/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "tests/support/exposition.h"
#include "tests/support/temp_dir.h"
#include "transport/metrics_endpoint.h"

namespace forktrial::transport {
namespace {

namespace fs = std::filesystem;
using forktrial::testing::TempDir;
using Clock = std::chrono::steady_clock;

// A /proc/PID/stat line whose command name holds a space and parentheses, as
// a process may name itself; its starttime (field 22) is 4321.
constexpr std::string_view kStat =
    "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 500 0 0 0 7 3 0 0 20 0 1 0 4321 "
    "12345678 900 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

TEST_CASE("a process's start in clock ticks is read after its command name",
          "[transport][metrics]") {
  CHECK(start_ticks_of_stat(kStat) == 4321u);
  CHECK(start_ticks_of_stat("7 (sh) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 1 1\n") == 99u);
}

TEST_CASE("a stat line without a command name, cut short or with a bad start is refused",
          "[transport][metrics]") {
  CHECK_FALSE(start_ticks_of_stat("1234 S 1 1234 1234 0 -1 4194560 500 0 0 0 7 3 0 0 20 0 1 0 43"));
  CHECK_FALSE(start_ticks_of_stat("1234 (sh) S 1 1234 1234 0 -1"));
  CHECK_FALSE(start_ticks_of_stat("7 (sh) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -99 1 1\n"));
  CHECK_FALSE(start_ticks_of_stat("7 (sh) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9x 1 1\n"));
  CHECK_FALSE(start_ticks_of_stat(""));
}

TEST_CASE("the boot time is the btime line of /proc/stat", "[transport][metrics]") {
  CHECK(boot_time_of_proc_stat("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n") ==
        1'700'000'000u);
  CHECK(boot_time_of_proc_stat("btime 12") == 12u);
  CHECK_FALSE(boot_time_of_proc_stat("cpu  1 2 3\nprocesses 9\n"));  // no btime
  CHECK_FALSE(boot_time_of_proc_stat("btime soon\n"));
  CHECK_FALSE(boot_time_of_proc_stat("xbtime 12\n"));  // another key that ends so
}

TEST_CASE("the resident set is the second of statm's seven fields", "[transport][metrics]") {
  CHECK(resident_pages_of_statm("2000 300 100 10 0 250 0\n") == 300u);
  CHECK_FALSE(resident_pages_of_statm("2000 300\n"));  // cut short
  CHECK_FALSE(resident_pages_of_statm("2000 -3 100 10 0 250 0\n"));
  CHECK_FALSE(resident_pages_of_statm(""));
}

void write_file(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

forktrial::testing::Exposition scrape(const prometheus::Registry& registry) {
  const std::string text = metrics_text(registry);
  INFO(text);
  auto parsed = forktrial::testing::parse_exposition(text);
  REQUIRE(parsed.has_value());
  return *parsed;
}

TEST_CASE("the process gauges come from a /proc tree, read again at most once a second",
          "[transport][metrics]") {
  TempDir proc;
  write_file(proc.path() / "stat", "cpu  1 2 3\nbtime 1700000000\n");
  write_file(proc.path() / "self" / "stat", kStat);
  write_file(proc.path() / "self" / "statm", "2000 300 100 10 0 250 0\n");
  for (const char* fd : {"0", "1", "2", "7"}) write_file(proc.path() / "self" / "fd" / fd, "");
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));

  prometheus::Registry registry;
  ProcessMetrics metrics(registry, proc.path());
  auto m = scrape(registry);
  CHECK(m.at("process_start_time_seconds") == Approx(1'700'000'000 + 4321 / ticks));
  CHECK(m.at("process_resident_memory_bytes") == 0);  // not read before observe()
  CHECK(m.types.at("process_open_fds") == "gauge");

  const Clock::time_point t0{std::chrono::hours(1)};
  metrics.observe(t0);
  m = scrape(registry);
  CHECK(m.at("process_resident_memory_bytes") == 300 * page);
  CHECK(m.at("process_open_fds") == 4);

  // The files change; within the second they are not read again.
  write_file(proc.path() / "self" / "statm", "2000 500 100 10 0 250 0\n");
  write_file(proc.path() / "self" / "fd" / "9", "");
  metrics.observe(t0 + std::chrono::milliseconds(999));
  CHECK(scrape(registry).at("process_open_fds") == 4);
  metrics.observe(t0 + std::chrono::seconds(1));
  m = scrape(registry);
  CHECK(m.at("process_resident_memory_bytes") == 500 * page);
  CHECK(m.at("process_open_fds") == 5);

  // Damaged or gone: the gauges keep their last values.
  write_file(proc.path() / "self" / "statm", "garbage\n");
  fs::remove_all(proc.path() / "self" / "fd");
  metrics.observe(t0 + std::chrono::seconds(2));
  m = scrape(registry);
  CHECK(m.at("process_resident_memory_bytes") == 500 * page);
  CHECK(m.at("process_open_fds") == 5);
}

TEST_CASE("a /proc without this process's files leaves the start time at 0",
          "[transport][metrics]") {
  TempDir proc;
  prometheus::Registry registry;
  ProcessMetrics metrics(registry, proc.path());
  metrics.observe(Clock::time_point{});
  const auto m = scrape(registry);
  CHECK(m.at("process_start_time_seconds") == 0);
  CHECK(m.at("process_resident_memory_bytes") == 0);
  CHECK(m.at("process_open_fds") == 0);
}

TEST_CASE("this process's own gauges: started before now, resident, its descriptors counted",
          "[transport][metrics]") {
  prometheus::Registry registry;
  ProcessMetrics metrics(registry);
  const Clock::time_point t0{std::chrono::hours(1)};
  metrics.observe(t0);
  auto m = scrape(registry);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(m.at("process_start_time_seconds") > now - 24 * 3600);
  CHECK(m.at("process_start_time_seconds") <= now + 1);
  CHECK(m.at("process_resident_memory_bytes") > 1 << 20);
  const double before = m.at("process_open_fds");
  CHECK(before >= 3);

  std::vector<UniqueFd> opened;
  for (int i = 0; i < 3; ++i) opened.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  for (const UniqueFd& fd : opened) REQUIRE(fd.get() >= 0);
  metrics.observe(t0 + std::chrono::seconds(1));
  CHECK(scrape(registry).at("process_open_fds") == before + 3);
}

}  // namespace
}  // namespace forktrial::transport
