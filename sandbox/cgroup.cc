#include "sandbox/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace forktrial::sandbox {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has_word(const std::string& text, std::string_view word) {
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (w == word) return true;
  }
  return false;
}

// Writes `value` to a control file; the error names the file and errno.
std::optional<std::string> write_control(const fs::path& file, const std::string& value) {
  UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return "open(\"" + file.string() + "\", O_WRONLY): " + errno_text(errno);
  const ssize_t n = retry_eintr([&] { return ::write(fd.get(), value.data(), value.size()); });
  if (n != static_cast<ssize_t>(value.size())) {
    return "write(\"" + file.string() + "\", \"" + value + "\"): " + errno_text(errno);
  }
  return std::nullopt;
}

// This process's cgroup in the v2 hierarchy ("0::/path"), or in the v1
// hierarchy that has `controller`; nullopt when /proc/self/cgroup has none.
std::optional<std::string> own_cgroup(std::string_view controller) {
  std::istringstream lines(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controller.empty()) {
      if (line.starts_with("0::")) return path;
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == controller) return path;
    }
  }
  return std::nullopt;
}

// Where a hierarchy's trial cgroups go, or why none can.
struct Parent {
  bool v2 = false;
  fs::path memory;  // v2: both are the one directory
  fs::path pids;
};

std::expected<fs::path, Status> v2_parent() {
  fs::path root;
  for (const char* candidate : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (fs::exists(fs::path(candidate) / "cgroup.controllers")) {
      root = candidate;
      break;
    }
  }
  if (root.empty())
    return failure(ErrorCode::failed_precondition,
                   std::string("no cgroup v2 hierarchy is mounted"));
  const auto own = own_cgroup("");
  if (!own)
    return failure(ErrorCode::failed_precondition,
                   "/proc/self/cgroup names no cgroup v2 of this process");
  const fs::path parent = root / fs::path(*own).relative_path();
  const std::string available = read_text(parent / "cgroup.controllers");
  if (!has_word(available, "memory") || !has_word(available, "pids")) {
    return failure(ErrorCode::failed_precondition,
                   "cgroup v2 at " + parent.string() +
                       " lacks the memory and pids controllers (cgroup.controllers: \"" +
                       available.substr(0, available.find('\n')) + "\")");
  }
  const std::string enabled = read_text(parent / "cgroup.subtree_control");
  if (!has_word(enabled, "memory") || !has_word(enabled, "pids")) {
    // Enabling them is refused while the cgroup itself holds processes (the
    // "no internal processes" rule): then this host's v2 cannot be used here.
    if (auto failed = write_control(parent / "cgroup.subtree_control", "+memory +pids")) {
      return failure(ErrorCode::failed_precondition,
                     "cgroup v2 at " + parent.string() +
                         " does not delegate memory and pids to its children: " + *failed);
    }
  }
  return parent;
}

std::expected<fs::path, Status> v1_parent(const char* controller) {
  const fs::path root = fs::path("/sys/fs/cgroup") / controller;
  if (!fs::exists(root / "tasks")) {
    return failure(ErrorCode::failed_precondition,
                   "no cgroup v1 " + std::string(controller) + " hierarchy at " + root.string());
  }
  const auto own = own_cgroup(controller);
  if (!own) {
    return failure(
        ErrorCode::failed_precondition,
        "/proc/self/cgroup names no cgroup v1 " + std::string(controller) + " of this process");
  }
  return root / fs::path(*own).relative_path();
}

std::expected<Parent, Status> find_parent() {
  auto v2 = v2_parent();
  if (v2) return Parent{true, *v2, *v2};
  auto memory = v1_parent("memory");
  auto pids = v1_parent("pids");
  if (memory && pids) return Parent{false, *memory, *pids};
  return failure(
      ErrorCode::failed_precondition,
      v2.error().message + "; " + (memory ? pids.error().message : memory.error().message));
}

std::string describe(const Parent& parent) {
  return parent.v2 ? "cgroup v2 at " + parent.memory.string()
                   : "cgroup v1 memory at " + parent.memory.string() + " and pids at " +
                         parent.pids.string();
}

std::uint64_t counter(const fs::path& file, std::string_view key) {
  std::istringstream lines(read_text(file));
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(key) && line.size() > key.size() && line[key.size()] == ' ') {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

}  // namespace

std::expected<std::string, Status> probe_trial_cgroups() {
  auto parent = find_parent();
  if (!parent) return std::unexpected(parent.error());
  return describe(*parent);
}

std::expected<TrialCgroup, Status> TrialCgroup::create(std::optional<std::uint64_t> memory_bytes,
                                                       std::uint64_t max_tasks) {
  auto parent = find_parent();
  if (!parent) return std::unexpected(parent.error());
  static std::atomic<std::uint64_t> made{0};
  const std::string name =
      "forktrial-" + std::to_string(::getpid()) + "-" + std::to_string(made.fetch_add(1));
  TrialCgroup cgroup;
  cgroup.v2_ = parent->v2;
  cgroup.memory_dir_ = parent->memory / name;
  cgroup.pids_dir_ = parent->pids / name;
  for (const auto& dir : {cgroup.memory_dir_, cgroup.pids_dir_}) {
    if (!cgroup.dirs_.empty() && cgroup.dirs_.back() == dir) continue;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return failure(ErrorCode::failed_precondition,
                     "mkdir(\"" + dir.string() + "\"): " + errno_text(errno));
    }
    cgroup.dirs_.push_back(dir);
  }
  std::optional<std::string> failed;
  if (memory_bytes) {
    const std::string bytes = std::to_string(*memory_bytes);
    failed = write_control(
        cgroup.memory_dir_ / (cgroup.v2_ ? "memory.max" : "memory.limit_in_bytes"), bytes);
    // No swap either, where the kernel accounts it: real memory means RAM.
    if (!failed) {
      write_control(
          cgroup.memory_dir_ / (cgroup.v2_ ? "memory.swap.max" : "memory.memsw.limit_in_bytes"),
          cgroup.v2_ ? "0" : bytes);
    }
  }
  if (!failed) failed = write_control(cgroup.pids_dir_ / "pids.max", std::to_string(max_tasks));
  if (failed) return failure(ErrorCode::failed_precondition, *failed);
  for (const auto& dir : cgroup.dirs_) {
    const fs::path procs = dir / "cgroup.procs";
    UniqueFd fd(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd)
      return failure(ErrorCode::failed_precondition,
                     "open(\"" + procs.string() + "\", O_WRONLY): " + errno_text(errno));
    cgroup.procs_.push_back(std::move(fd));
  }
  cgroup.description_ = (cgroup.v2_ ? "cgroup v2 " : "cgroup v1 memory+pids ") +
                        cgroup.memory_dir_.string() +
                        (cgroup.v2_ ? "" : " and " + cgroup.pids_dir_.string());
  return cgroup;
}

TrialCgroup::TrialCgroup(TrialCgroup&& other) noexcept
    : dirs_(std::move(other.dirs_)),
      memory_dir_(std::move(other.memory_dir_)),
      pids_dir_(std::move(other.pids_dir_)),
      v2_(other.v2_),
      procs_(std::move(other.procs_)),
      description_(std::move(other.description_)) {
  other.dirs_.clear();
}

TrialCgroup::~TrialCgroup() {
  procs_.clear();
  // The child's group was killed and its leader reaped, but the kernel may
  // still count exiting tasks for a moment: rmdir is EBUSY until then.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      if (::rmdir(it->c_str()) == 0 || errno != EBUSY) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

TrialCgroup::Events TrialCgroup::events() const {
  Events events;
  if (dirs_.empty()) return events;
  events.tasks_refused = counter(pids_dir_ / "pids.events", "max");
  events.oom_kills =
      counter(memory_dir_ / (v2_ ? "memory.events" : "memory.oom_control"), "oom_kill");
  return events;
}

}  // namespace forktrial::sandbox
