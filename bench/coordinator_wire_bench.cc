// The coordinator over the real wire: a `forktrial-full coordinator` process
// on a durable store, driven as fast as it leases and reconciles by
// synthetic workers that run nothing (each assignment is answered at once
// with the report of a trivial trial) over TCP on the loopback. Prints
//
//  - its throughput in trials per second (target: at least 5,000);
//  - its CPU per trial (user + system, every thread, from /proc), against a
//    baseline measured in the same run: the same records appended to a bare
//    LMDB environment (the entries the coordinator's store gained, written
//    with its flags in as many transactions and forced flushes as it made),
//    plus one ZeroMQ round trip of a report and its acknowledgement
//    (DEALER to ROUTER over the loopback, in windows of the workers'
//    slots). Target: at most 3x.
//
// The jobs are submitted first and their submission is not counted: what
// is measured runs from the workers' first offer to the last report's
// acknowledgement.
//
// usage: coordinator_wire_bench [--trials N] [--workers N] [--slots N]
//                               [--events N] [--dir DIR]
// Exit status: 0 when measured (the figures are for the README), 1 when the
// coordinator failed or refused, 2 on a usage error.
#include <arpa/inet.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "schema/wire_codec.h"
#include "synthetic_peers.h"

namespace {

using namespace forktrial;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using schema::wire::Envelope;

constexpr double kTargetRate = 5000;
constexpr double kTargetRatio = 3.0;
constexpr std::uint32_t kJobTrials = 10'000;

struct Config {
  std::uint64_t trials = 40'000;
  unsigned workers = 4;
  std::uint32_t slots = 256;
  std::uint32_t events = 1;
  fs::path dir = fs::temp_directory_path();
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This process's CPU (user + system, every thread), in seconds.
double own_cpu() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(usage.ru_utime) + s(usage.ru_stime);
}

// Another process's CPU (user + system, every thread), in seconds, from
// /proc/PID/stat.
double process_cpu(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) throw std::runtime_error("cannot read the coordinator's CPU");
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  // After the name: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::uint16_t free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("cannot find a free TCP port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// GET /metrics from 127.0.0.1:port; the body.
std::string scrape(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    if (fd >= 0) ::close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string answer;
  char buffer[8192];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) answer.append(buffer, n);
  ::close(fd);
  const auto body = answer.find("\r\n\r\n");
  return body == std::string::npos ? "" : answer.substr(body + 4);
}

// A metric's value in an exposition; -1 when absent.
double metric(const std::string& exposition, const std::string& name) {
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

// A store's entries, table by table (key -> value).
using Tables = std::map<std::string, std::map<std::string, std::string>>;
constexpr const char* kTables[] = {"runs", "run_numbers", "events", "event_ids", "blobs"};

Tables read_tables(const fs::path& store) {
  Tables tables;
  MDB_env* env = nullptr;
  if (mdb_env_create(&env) != 0) throw std::runtime_error("mdb_env_create");
  mdb_env_set_maxdbs(env, 16);
  mdb_env_set_mapsize(env, std::size_t{1} << 40);
  if (mdb_env_open(env, store.c_str(), MDB_RDONLY, 0600) != 0) {
    mdb_env_close(env);
    throw std::runtime_error("cannot open the coordinator's store to read it");
  }
  MDB_txn* txn = nullptr;
  mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  for (const char* name : kTables) {
    MDB_dbi dbi = 0;
    if (mdb_dbi_open(txn, name, 0, &dbi) != 0) continue;
    MDB_cursor* cursor = nullptr;
    mdb_cursor_open(txn, dbi, &cursor);
    MDB_val key;
    MDB_val value;
    auto& table = tables[name];
    for (int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)) {
      table.emplace(std::string(static_cast<const char*>(key.mv_data), key.mv_size),
                    std::string(static_cast<const char*>(value.mv_data), value.mv_size));
    }
    mdb_cursor_close(cursor);
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return tables;
}

struct Entry {
  std::string table;
  std::string key;
  std::string value;
};

// What `after` holds that `before` did not, or held otherwise.
std::vector<Entry> written_between(const Tables& before, const Tables& after) {
  std::vector<Entry> written;
  for (const auto& [name, table] : after) {
    const auto was = before.find(name);
    for (const auto& [key, value] : table) {
      if (was != before.end()) {
        const auto old = was->second.find(key);
        if (old != was->second.end() && old->second == value) continue;
      }
      written.push_back({name, key, value});
    }
  }
  return written;
}

// Writes `entries` to a new LMDB environment at `dir`, with the
// coordinator's flags (MDB_NOMETASYNC), in `commits` transactions and
// `syncs` forced flushes spread among them; the CPU it took, in seconds.
double bare_lmdb(const fs::path& dir, std::vector<Entry> entries, std::uint64_t commits,
                 std::uint64_t syncs) {
  fs::create_directories(dir);
  MDB_env* env = nullptr;
  mdb_env_create(&env);
  mdb_env_set_maxdbs(env, 16);
  mdb_env_set_mapsize(env, std::size_t{4} << 30);
  if (mdb_env_open(env, dir.c_str(), MDB_NOMETASYNC, 0600) != 0) {
    throw std::runtime_error("cannot open the bare LMDB environment");
  }
  std::map<std::string, MDB_dbi> dbis;
  {
    MDB_txn* txn = nullptr;
    mdb_txn_begin(env, nullptr, 0, &txn);
    for (const char* name : kTables) mdb_dbi_open(txn, name, MDB_CREATE, &dbis[name]);
    mdb_txn_commit(txn);
  }
  // Interleaved as the coordinator writes them: each transaction takes its
  // share of every table, in key order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.table < b.table; });
  std::map<std::string, std::vector<const Entry*>> by_table;
  for (const Entry& e : entries) by_table[e.table].push_back(&e);
  commits = std::max<std::uint64_t>(commits, 1);
  const double start = own_cpu();
  std::uint64_t synced = 0;
  for (std::uint64_t c = 0; c < commits; ++c) {
    MDB_txn* txn = nullptr;
    if (mdb_txn_begin(env, nullptr, 0, &txn) != 0) throw std::runtime_error("mdb_txn_begin");
    for (const auto& [name, list] : by_table) {
      const std::size_t from = list.size() * c / commits;
      const std::size_t to = list.size() * (c + 1) / commits;
      for (std::size_t i = from; i < to; ++i) {
        MDB_val key{list[i]->key.size(), const_cast<char*>(list[i]->key.data())};
        MDB_val value{list[i]->value.size(), const_cast<char*>(list[i]->value.data())};
        if (mdb_put(txn, dbis[name], &key, &value, 0) != 0) throw std::runtime_error("mdb_put");
      }
    }
    if (mdb_txn_commit(txn) != 0) throw std::runtime_error("mdb_txn_commit");
    while (synced < syncs && synced * commits < syncs * (c + 1)) {
      mdb_env_sync(env, 1);
      ++synced;
    }
  }
  const double cpu = own_cpu() - start;
  mdb_env_close(env);
  return cpu;
}

// CPU per round trip (both ends, every thread of this process) of `count`
// reports and their acknowledgements between a DEALER and a ROUTER over the
// loopback, `window` in flight at a time.
double zmq_round_trip(const std::string& report, const std::string& ack, std::uint64_t count,
                      std::uint32_t window) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  router.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::linger, 0);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  router.bind(endpoint);
  dealer.connect(endpoint);
  auto exchange = [&](std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const std::uint64_t burst = std::min<std::uint64_t>(window, n - done);
      for (std::uint64_t i = 0; i < burst; ++i) dealer.send(zmq::buffer(report));
      for (std::uint64_t i = 0; i < burst; ++i) {
        zmq::message_t route;
        zmq::message_t body;
        (void)router.recv(route);
        (void)router.recv(body);
        router.send(route, zmq::send_flags::sndmore);
        router.send(zmq::buffer(ack));
      }
      for (std::uint64_t i = 0; i < burst; ++i) {
        zmq::message_t reply;
        (void)dealer.recv(reply);
      }
      done += burst;
    }
  };
  exchange(window);  // connected, warm
  const double start = own_cpu();
  exchange(count);
  return (own_cpu() - start) / static_cast<double>(count);
}

class Bench {
 public:
  explicit Bench(const Config& config) : config_(config) {
    std::string pattern = (config.dir / "forktrial-wire-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
  }
  ~Bench() {
    stop_coordinator();
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  int run() {
    const fs::path store = root_ / "store";
    trial_ = bench::seed_trivial_store(store);
    const std::uint16_t port = free_tcp_port();
    http_ = free_tcp_port();
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(port);
    start_coordinator(store);

    zmq::context_t context(1);
    zmq::socket_t client = connect(context);
    call(client, bench::client_hello_frame(++request_), "a client's hello");
    for (std::uint64_t done = 0; done < config_.trials; done += kJobTrials) {
      const auto size =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(kJobTrials, config_.trials - done));
      call(client, bench::submission_frame(++request_, "wire", size, trial_), "a submission");
    }
    const Tables before = read_tables(store);
    const std::string metrics_before = scrape(http_);
    const double cpu_before = process_cpu(coordinator_);

    const auto started = Clock::now();
    const double own_before = own_cpu();
    drive_workers(context);
    const double wall = seconds_since(started);
    const double own = own_cpu() - own_before;
    const double cpu = process_cpu(coordinator_) - cpu_before;
    const std::string metrics_after = scrape(http_);
    const auto counted = [&](const char* name) {
      const double was = metric(metrics_before, name);
      const double now = metric(metrics_after, name);
      if (was < 0 || now < 0) throw std::runtime_error(std::string("/metrics lacks ") + name);
      return static_cast<std::uint64_t>(now - was);
    };
    const std::uint64_t commits = counted("forktrial_store_commits_total");
    const std::uint64_t syncs = counted("forktrial_store_syncs_total");
    client.close();
    stop_coordinator();

    const auto trials = static_cast<double>(config_.trials);
    const double rate = trials / wall;
    const double per_trial = cpu / trials;
    std::printf(
        "trials                 %llu, %u synthetic workers of %u slots, %u event(s) "
        "each, over %s\n",
        static_cast<unsigned long long>(config_.trials), config_.workers, config_.slots,
        config_.events, endpoint_.c_str());
    std::printf("throughput             %.0f trials/s (%.2f s) [target >= %.0f: %s]\n", rate, wall,
                kTargetRate, rate >= kTargetRate ? "met" : "NOT met");
    std::printf(
        "coordinator CPU        %.1f us per trial (%.2f s in all); %llu commits, %llu "
        "forced flushes (%.1f trials per commit)\n",
        per_trial * 1e6, cpu, static_cast<unsigned long long>(commits),
        static_cast<unsigned long long>(syncs),
        trials / static_cast<double>(std::max<std::uint64_t>(commits, 1)));
    std::printf("synthetic workers      %.1f us per trial of this process's CPU\n",
                own / trials * 1e6);

    // The baseline: the same entries into bare LMDB, and a round trip.
    const std::vector<Entry> written = written_between(before, read_tables(store));
    std::uint64_t bytes = 0;
    for (const Entry& e : written) bytes += e.key.size() + e.value.size();
    const double lmdb = bare_lmdb(root_ / "bare", written, commits, syncs) / trials;
    capnp::MallocMessageBuilder ref_message;
    auto ref = ref_message.initRoot<schema::wire::TrialRef>();
    ref.setJob("job_0123456789abcdef");
    ref.setIndex(1);
    ref.setAttempt(1);
    const std::string report = bench::report_frame(1, ref.asReader(), config_.events);
    capnp::MallocMessageBuilder ack_message;
    auto ack = wire::start(ack_message, 1).initReportAck();
    ack.setTrial(ref.asReader());
    ack.setVerdict(schema::wire::ReportVerdict::ACCEPTED);
    const double round_trip =
        zmq_round_trip(report, wire::encode(ack_message), config_.trials, config_.slots);
    const double baseline = lmdb + round_trip;
    const double ratio = per_trial / baseline;
    std::printf(
        "baseline               %.1f us per trial: bare LMDB %.1f us (%zu entries, %.0f "
        "bytes per trial, as many commits and flushes) + one ZeroMQ round trip %.1f us\n",
        baseline * 1e6, lmdb * 1e6, written.size(), static_cast<double>(bytes) / trials,
        round_trip * 1e6);
    std::printf("coordinator / baseline %.2fx [target <= %.1fx: %s]\n", ratio, kTargetRatio,
                ratio <= kTargetRatio ? "met" : "NOT met");
    return 0;
  }

 private:
  void start_coordinator(const fs::path& store) {
    std::vector<std::string> command = {FORKTRIAL_FULL_FOR_BENCH,
                                        "coordinator",
                                        "--store",
                                        store.string(),
                                        "--listen",
                                        endpoint_,
                                        "--http",
                                        "127.0.0.1:" + std::to_string(http_),
                                        "--log-level",
                                        "error",
                                        "--max-worker-slots",
                                        std::to_string(config_.slots)};
    std::vector<char*> args;
    for (auto& arg : command) args.push_back(arg.data());
    args.push_back(nullptr);
    if (const int error =
            ::posix_spawn(&coordinator_, args[0], nullptr, nullptr, args.data(), environ)) {
      throw std::runtime_error(std::string("posix_spawn(") + args[0] +
                               "): " + std::strerror(error));
    }
    for (int i = 0; scrape(http_).empty(); ++i) {
      if (i == 300) throw std::runtime_error("the coordinator did not answer in 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  void stop_coordinator() {
    if (coordinator_ <= 0) return;
    ::kill(coordinator_, SIGTERM);
    int status = 0;
    ::waitpid(coordinator_, &status, 0);
    coordinator_ = 0;
  }

  zmq::socket_t connect(zmq::context_t& context) {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.set(zmq::sockopt::sndhwm, 0);
    socket.connect(endpoint_);
    return socket;
  }

  // Sends `frame` and waits for its answer; throws when it is an error.
  wire::Frame call(zmq::socket_t& socket, const std::string& frame, const char* what) {
    socket.send(zmq::buffer(frame));
    zmq::message_t reply;
    if (!socket.recv(reply)) throw std::runtime_error(std::string("no answer to ") + what);
    auto decoded = wire::decode(reply.to_string_view());
    if (!decoded) throw std::runtime_error(std::string("an unreadable answer to ") + what);
    if (decoded->envelope().isError()) {
      throw std::runtime_error(std::string("the coordinator refused ") + what + ": " +
                               wire::text(decoded->envelope().getError().getMessage()));
    }
    return std::move(*decoded);
  }

  struct Worker {
    zmq::socket_t socket;
    std::uint32_t held = 0;  // assignments reported, not yet acknowledged
    bool offering = false;   // a requestWork unanswered
  };

  // Every worker offers its free slots, reports each assignment at once, and
  // offers again; until every trial's report is accepted.
  void drive_workers(zmq::context_t& context) {
    std::vector<Worker> workers;
    for (unsigned w = 0; w < config_.workers; ++w) {
      workers.push_back(Worker{connect(context)});
      call(workers.back().socket,
           bench::worker_hello_frame(++request_, "bench-" + std::to_string(w), config_.slots),
           "a worker's hello");
    }
    std::vector<zmq::pollitem_t> items;
    for (auto& worker : workers) items.push_back({worker.socket.handle(), 0, ZMQ_POLLIN, 0});
    std::uint64_t accepted = 0;
    std::uint64_t told = 0;
    auto offer = [&](Worker& worker) {
      if (worker.offering || worker.held >= config_.slots) return;
      worker.socket.send(
          zmq::buffer(bench::request_work_frame(++request_, config_.slots - worker.held)));
      worker.offering = true;
    };
    for (auto& worker : workers) offer(worker);
    auto last = Clock::now();
    while (accepted < config_.trials) {
      if (zmq::poll(items, std::chrono::milliseconds(1000)) == 0 && seconds_since(last) > 30) {
        throw std::runtime_error("the coordinator went silent with " +
                                 std::to_string(config_.trials - accepted) + " trials left");
      }
      for (std::size_t w = 0; w < workers.size(); ++w) {
        if ((items[w].revents & ZMQ_POLLIN) == 0) continue;
        Worker& worker = workers[w];
        zmq::message_t reply;
        while (worker.socket.recv(reply, zmq::recv_flags::dontwait)) {
          last = Clock::now();
          auto frame = wire::decode(reply.to_string_view());
          if (!frame) throw std::runtime_error("an unreadable message from the coordinator");
          const auto envelope = frame->envelope();
          if (envelope.isAssignments()) {
            worker.offering = false;
            for (auto assignment : envelope.getAssignments().getAssignments()) {
              worker.socket.send(zmq::buffer(
                  bench::report_frame(++request_, assignment.getTrial(), config_.events)));
              ++worker.held;
            }
          } else if (envelope.isReportAck()) {
            if (envelope.getReportAck().getVerdict() != schema::wire::ReportVerdict::ACCEPTED) {
              throw std::runtime_error("a report was not accepted: " +
                                       wire::text(envelope.getReportAck().getReason()));
            }
            --worker.held;
            ++accepted;
          } else if (envelope.isError()) {
            throw std::runtime_error("the coordinator refused: " +
                                     wire::text(envelope.getError().getMessage()));
          }
          offer(worker);
        }
      }
      if (accepted / 10'000 != told / 10'000) {
        told = accepted;
        std::fprintf(stderr, "wire bench: %llu of %llu trials\r",
                     static_cast<unsigned long long>(accepted),
                     static_cast<unsigned long long>(config_.trials));
      }
    }
    std::fprintf(stderr, "\n");
  }

  Config config_;
  fs::path root_;
  std::string trial_;
  std::string endpoint_;
  std::uint16_t http_ = 0;
  pid_t coordinator_ = 0;
  std::uint64_t request_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (bench::number_option(argc, argv, i, "--trials", 1, UINT64_MAX, config.trials) ||
        bench::number_option(argc, argv, i, "--workers", 1, 1000, config.workers) ||
        bench::number_option(argc, argv, i, "--slots", 1, 1024, config.slots) ||
        bench::number_option(argc, argv, i, "--events", 0, 1000, config.events)) {
      continue;
    }
    if (arg == "--dir" && has_value) {
      config.dir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: coordinator_wire_bench [--trials N] [--workers 1..1000] "
                   "[--slots 1..1024] [--events 0..1000] [--dir DIR]\n");
      return 2;
    }
  }
  try {
    Bench bench(config);
    return bench.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coordinator_wire_bench: %s\n", e.what());
    return 1;
  }
}
