// Store benchmarks, each against a baseline measured in the same run:
//
//  1. batched appends vs a bare LMDB put loop writing the same value bytes
//     under the same keys in the same batch sizes (durable and MDB_NOSYNC);
//  2. forking a run of 1,000,000 events vs forking a run of 10 events;
//  3. reading a fork's 1,000,000 inherited events, in events per second.
//
// Each comparison prints PASS or "MISS target"; the exit status is 0 when all
// targets are met, 1 when one is missed, 2 on a usage or setup error.
//
// usage: store_bench [--events N] [--batch B] [--big N] [--forks F] [--dir DIR]
#include <lmdb.h>
#include <stdlib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "store/event_store.h"

namespace {

using namespace forktrial::store;
using Clock = std::chrono::steady_clock;

struct Config {
  int events = 200'000;  // appended in the throughput comparison
  int batch = 1'000;
  int big = 1'000'000;  // events of the large run that is forked and read
  int forks = 200;      // forks timed per run size
  std::filesystem::path dir = std::filesystem::temp_directory_path();
};

constexpr double kAppendTarget = 0.5;      // store / bare LMDB throughput
constexpr double kForkTolerance = 1.5;     // big-run fork time within 1.5x of small-run's
constexpr double kReadTarget = 1'000'000;  // events per second

const char* verdict(bool met) {
  return met ? "PASS" : "MISS target";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class ScratchDir {
 public:
  explicit ScratchDir(const std::filesystem::path& parent) {
    std::string pattern = (parent / "forktrial-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

NewEvent make_event(int i) {
  NewEvent e;
  e.id = EventId("evt_" + std::to_string(i));
  e.type = i % 10 == 0 ? "behavior.failed" : "object.created";
  e.payload = R"({"type":"greeting","data":{"text":"hello number )" + std::to_string(i) +
              R"(","lang":"en"}})";
  e.actor = "greeter";
  e.caused_by = EventId("evt_" + std::to_string(i > 1 ? i - 1 : 1));
  e.timestamp = "2026-01-02T03:04:05.123456+00:00";
  return e;
}

std::vector<std::vector<NewEvent>> make_batches(int events, int batch, int first_id) {
  std::vector<std::vector<NewEvent>> batches;
  for (int i = 0; i < events; i += batch) {
    std::vector<NewEvent> b;
    for (int j = i; j < std::min(events, i + batch); ++j) b.push_back(make_event(first_id + j));
    batches.push_back(std::move(b));
  }
  return batches;
}

void check(int rc, const char* what) {
  if (rc != MDB_SUCCESS) throw std::runtime_error(std::string(what) + ": " + mdb_strerror(rc));
}

// The stored value bytes of each event, taken from a segment (its canonical
// form is exactly what the store writes).
std::vector<std::string> stored_values(const std::vector<std::byte>& segment) {
  std::vector<std::string> values;
  std::size_t offset = 16;
  while (offset < segment.size()) {
    std::uint64_t length = 0;
    for (int i = 0; i < 8; ++i) {
      length = (length << 8) | std::to_integer<std::uint64_t>(segment[offset + i]);
    }
    offset += 8;
    values.emplace_back(reinterpret_cast<const char*>(segment.data() + offset), length);
    offset += length;
  }
  return values;
}

// A bare LMDB put loop: one unnamed database, keys (run 1, seq) big-endian,
// the store's value bytes, one transaction per batch.
double bare_lmdb_seconds(const std::filesystem::path& dir, const std::vector<std::string>& values,
                         int batch, bool sync) {
  std::filesystem::create_directories(dir);
  MDB_env* env = nullptr;
  check(mdb_env_create(&env), "mdb_env_create");
  check(mdb_env_set_mapsize(env, std::size_t{4} << 30), "mdb_env_set_mapsize");
  check(mdb_env_open(env, dir.c_str(), MDB_NOTLS | (sync ? 0 : MDB_NOSYNC), 0644), "mdb_env_open");
  auto start = Clock::now();
  for (std::size_t i = 0; i < values.size(); i += batch) {
    MDB_txn* txn = nullptr;
    check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
    MDB_dbi dbi;
    check(mdb_dbi_open(txn, nullptr, 0, &dbi), "mdb_dbi_open");
    for (std::size_t j = i; j < std::min(values.size(), i + batch); ++j) {
      unsigned char key[16] = {};
      key[7] = 1;
      std::uint64_t seq = j + 1;
      for (int k = 15; k >= 8; --k, seq >>= 8) key[k] = static_cast<unsigned char>(seq & 0xff);
      MDB_val k{16, key};
      MDB_val v{values[j].size(), const_cast<char*>(values[j].data())};
      check(mdb_put(txn, dbi, &k, &v, 0), "mdb_put");
    }
    check(mdb_txn_commit(txn), "mdb_txn_commit");
  }
  double elapsed = seconds_since(start);
  mdb_env_close(env);
  return elapsed;
}

double store_append_seconds(const std::filesystem::path& dir,
                            const std::vector<std::vector<NewEvent>>& batches, bool sync,
                            std::vector<std::string>* values) {
  StoreOptions options;
  options.sync = sync;
  EventStore store(dir, options);
  RunInfo run = *store.create_run({.id = RunId("run_bench")});
  std::uint64_t head = 0;
  auto start = Clock::now();
  for (const auto& batch : batches) {
    auto appended = store.append(run.id, head, batch);
    if (!appended) throw std::runtime_error(appended.error().message);
    head = *appended;
  }
  double elapsed = seconds_since(start);
  if (values != nullptr) {
    auto snap = store.snapshot();
    *values = stored_values(snap.segment(*snap.run(run.id), head));
  }
  return elapsed;
}

bool bench_appends(const Config& config, const std::filesystem::path& root) {
  auto batches = make_batches(config.events, config.batch, 1);
  std::vector<std::string> values;
  store_append_seconds(root / "warmup", batches, false, &values);
  std::size_t bytes = 0;
  for (const auto& v : values) bytes += v.size();
  std::printf("## Batched appends: %d events in batches of %d (%zu value bytes)\n", config.events,
              config.batch, bytes);
  bool met = true;
  for (bool sync : {true, false}) {
    // Best of three alternating rounds, so neither side gets a warmer cache.
    double best_store = 1e30;
    double best_bare = 1e30;
    for (int round = 0; round < 3; ++round) {
      std::string tag = (sync ? "sync" : "nosync") + std::to_string(round);
      best_bare = std::min(best_bare,
                           bare_lmdb_seconds(root / ("bare_" + tag), values, config.batch, sync));
      best_store = std::min(best_store,
                            store_append_seconds(root / ("store_" + tag), batches, sync, nullptr));
      std::filesystem::remove_all(root / ("bare_" + tag));
      std::filesystem::remove_all(root / ("store_" + tag));
    }
    double store_rate = config.events / best_store;
    double bare_rate = config.events / best_bare;
    double ratio = store_rate / bare_rate;
    met = met && ratio >= kAppendTarget;
    std::printf(
        "%-8s store %10.0f events/s  bare LMDB %10.0f events/s  ratio %.2f (target >= %.2f)"
        "  %s\n",
        sync ? "durable" : "nosync", store_rate, bare_rate, ratio, kAppendTarget,
        verdict(ratio >= kAppendTarget));
  }
  return met;
}

double median_fork_micros(EventStore& store, const RunId& parent, const EventId& at, int forks,
                          const std::string& prefix) {
  std::vector<double> micros;
  for (int i = 0; i < forks; ++i) {
    auto start = Clock::now();
    auto fork = store.fork(parent, at, {.id = RunId(prefix + std::to_string(i))});
    micros.push_back(seconds_since(start) * 1e6);
    if (!fork) throw std::runtime_error(fork.error().message);
  }
  std::sort(micros.begin(), micros.end());
  return micros[micros.size() / 2];
}

bool bench_forks_and_reads(const Config& config, const std::filesystem::path& root) {
  StoreOptions options;
  options.sync = false;  // setup speed; forks and reads do not depend on it
  EventStore store(root / "forks", options);
  RunInfo big = *store.create_run({.id = RunId("run_big")});
  RunInfo small = *store.create_run({.id = RunId("run_small")});
  std::uint64_t head = 0;
  for (const auto& batch : make_batches(config.big, 10'000, 1)) {
    head = *store.append(big.id, head, batch);
  }
  if (!store.append(small.id, 0, make_batches(10, 10, 1).front())) {
    throw std::runtime_error("append to the small run failed");
  }

  // Interleave the two sizes so drift in the machine affects both alike.
  double big_us = 0;
  double small_us = 0;
  for (int round = 0; round < 2; ++round) {
    small_us += median_fork_micros(store, small.id, EventId("evt_10"), config.forks / 2,
                                   "fs" + std::to_string(round) + "_");
    big_us += median_fork_micros(store, big.id, EventId("evt_" + std::to_string(config.big)),
                                 config.forks / 2, "fb" + std::to_string(round) + "_");
  }
  big_us /= 2;
  small_us /= 2;
  std::printf("\n## Fork (median of %d, durable commit excluded: MDB_NOSYNC)\n", config.forks);
  double fork_ratio = big_us / small_us;
  bool fork_met = fork_ratio <= kForkTolerance && fork_ratio >= 1 / kForkTolerance;
  std::printf(
      "fork of a %d-event run: %.1f us   fork of a 10-event run: %.1f us   ratio %.2f"
      " (target within %.1fx)  %s\n",
      config.big, big_us, small_us, fork_ratio, kForkTolerance, verdict(fork_met));

  auto fork =
      store.fork(big.id, EventId("evt_" + std::to_string(config.big)), {.id = RunId("run_read")});
  auto snap = store.snapshot();
  RunInfo reader = *snap.run(fork->id);
  std::printf("\n## Reading a fork's %d inherited events (best of 3)\n", config.big);
  double best_views = 0;
  double best_events = 0;
  for (int round = 0; round < 3; ++round) {
    std::uint64_t count = 0;
    std::size_t bytes = 0;
    auto start = Clock::now();
    snap.for_each_event(reader, 1, [&](const EventView& e) {
      ++count;
      bytes += e.payload.size();
      return true;
    });
    best_views = std::max(best_views, count / seconds_since(start));
    start = Clock::now();
    auto history = snap.history(reader);
    best_events = std::max(best_events, history.size() / seconds_since(start));
    if (count != static_cast<std::uint64_t>(config.big) || history.size() != count || bytes == 0) {
      throw std::runtime_error("read " + std::to_string(count) + " events, expected " +
                               std::to_string(config.big));
    }
  }
  std::printf("in-place views (for_each_event): %.2f M events/s\n", best_views / 1e6);
  bool read_met = best_events >= kReadTarget;
  std::printf("materialized Events (history):   %.2f M events/s (target >= %.2f M)  %s\n",
              best_events / 1e6, kReadTarget / 1e6, verdict(read_met));
  return fork_met && read_met;
}

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr,
               "store_bench: %s\n"
               "usage: store_bench [--events N] [--batch B] [--big N] [--forks F] [--dir DIR]\n",
               why.c_str());
  std::exit(2);
}

int parse_count(std::string_view flag, std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
    usage_error(std::string(flag) + " needs a positive integer, got \"" + std::string(text) + "\"");
  }
  return value;
}

Config parse_options(int argc, char** argv) {
  Config config;
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') config.dir = tmp;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") usage_error("measures the event store against LMDB");
    if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
    std::string_view value = argv[++i];
    if (flag == "--events") {
      config.events = parse_count(flag, value);
    } else if (flag == "--batch") {
      config.batch = parse_count(flag, value);
    } else if (flag == "--big") {
      config.big = parse_count(flag, value);
    } else if (flag == "--forks") {
      config.forks = std::max(2, parse_count(flag, value));
    } else if (flag == "--dir") {
      config.dir = std::string(value);
    } else {
      usage_error("unknown option " + std::string(flag));
    }
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  const Config config = parse_options(argc, argv);
  try {
    ScratchDir dir(config.dir);
    bool met = bench_appends(config, dir.path());
    std::fflush(stdout);
    met = bench_forks_and_reads(config, dir.path()) && met;
    return met ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 2;
  }
}
