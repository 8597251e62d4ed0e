// `forktrial coordinator | worker | submit | status | wait | cancel | results |
// workers | batch`: trials sharded over ZeroMQ to workers, and the batch
// that runs the same thing on this machine alone.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/timestamp.h"
#include "coordinator/batch_file.h"
#include "coordinator/candidate_ranking.h"
#include "coordinator/client.h"
#include "coordinator/server.h"
#include "pack/bundle_archive.h"
#include "pack/executor.h"
#include "sandbox/activegraph_child.h"
#include "sandbox/executor.h"
#include "sandbox/limit_units.h"
#include "sandbox/trial.h"
#include "schema/wire_codec.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/results_sqlite.h"
#include "tools/stop_signals.h"
#include "tools/store_access.h"
#include "tools/terminal.h"
#include "transport/curve.h"
#include "worker/worker.h"

extern char** environ;

namespace forktrial::tools {
namespace {

// What to do about a --key that cannot be read: the library says what is wrong.
constexpr const char* kKeygenAdvice = "\n`forktrial keygen FILE` writes a keypair file";

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr const char* kCoordinatorEnv = "FORKTRIAL_COORDINATOR";
constexpr const char* kDefaultEndpoint = "tcp://127.0.0.1:7600";

// --log-level and --log-json, shared by the daemons.
struct LogOptions {
  std::string level = "info";
  bool json = false;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--log-level", level, "debug, info, warn or error")
        ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
        ->capture_default_str();
    cmd->add_flag("--log-json", json, "Log one JSON object per line");
  }

  // A Log writing to stderr through spdlog. Messages are escaped for JSON
  // output, so a line is always one object.
  Log make(const std::string& name) const {
    auto logger = spdlog::stderr_color_mt(name);
    logger->set_level(spdlog::level::from_str(level));
    if (json) {
      logger->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","role":"%n","msg":%v})",
                          spdlog::pattern_time_type::utc);
    } else {
      logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %n %l: %v", spdlog::pattern_time_type::utc);
    }
    const bool as_json = json;
    return [logger, as_json](LogLevel severity, const std::string& text) {
      const std::string line = as_json ? ordered_json(text).dump() : terminal_text(text);
      switch (severity) {
        case LogLevel::debug:
          logger->debug(line);
          break;
        case LogLevel::info:
          logger->info(line);
          break;
        case LogLevel::warn:
          logger->warn(line);
          break;
        case LogLevel::error:
          logger->error(line);
          break;
      }
    };
  }
};

std::string default_endpoint() {
  const char* env = std::getenv(kCoordinatorEnv);
  return env != nullptr && *env != '\0' ? env : kDefaultEndpoint;
}

// A worker's or client's CURVE credentials: both flags or neither.
struct KeyOptions {
  std::string key;
  std::string coordinator_key;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--key", key,
                    "This peer's CurveZMQ keypair file (forktrial keygen); with "
                    "--coordinator-key, the connection is authenticated and encrypted")
        ->envname("FORKTRIAL_KEY");
    cmd->add_option("--coordinator-key", coordinator_key,
                    "The coordinator's public key: 40 Z85 characters, or its .pub file")
        ->envname("FORKTRIAL_COORDINATOR_KEY");
  }

  std::optional<transport::ClientKeys> load() const {
    if (key.empty() && coordinator_key.empty()) return std::nullopt;
    if (key.empty() || coordinator_key.empty()) {
      throw CommandFailed(std::string("give both --key (this peer's keypair) and "
                                      "--coordinator-key (the coordinator's public key), or "
                                      "neither; ") +
                              (key.empty() ? "--key" : "--coordinator-key") + " is missing",
                          kUsageError);
    }
    auto own = transport::read_keypair(key);
    if (!own) throw CommandFailed("--key: " + own.error().message + kKeygenAdvice, kUsageError);
    auto server = transport::read_public_key(coordinator_key);
    if (!server) throw CommandFailed("--coordinator-key: " + server.error().message, kUsageError);
    return transport::ClientKeys{*own, *server};
  }
};

void add_endpoint(CLI::App* cmd, std::string& endpoint) {
  endpoint = default_endpoint();
  cmd->add_option("--coordinator", endpoint,
                  "The coordinator's endpoint (env FORKTRIAL_COORDINATOR)")
      ->capture_default_str();
}

// --http ADDR: the daemon's read-only HTTP endpoint (probes, metrics, and the
// coordinator's status page); parsed when the command runs.
void add_http_option(CLI::App* cmd, std::string& address, const std::string& serves) {
  cmd->add_option("--http", address,
                  "Serve " + serves +
                      " over HTTP on HOST:PORT, or PORT on 127.0.0.1 (e.g. 0.0.0.0:7680); env "
                      "FORKTRIAL_HTTP. Default: not served")
      ->envname("FORKTRIAL_HTTP");
}

std::optional<transport::HttpAddress> http_address(const std::string& text) {
  if (text.empty()) return std::nullopt;
  auto address = transport::parse_http_address(text);
  if (!address) throw CommandFailed("--http: " + address.error().message, kUsageError);
  return *address;
}

void add_coordinator(CLI::App& app) {
  auto config = std::make_shared<coordinator::ServerConfig>();
  auto store = std::make_shared<std::string>(kDefaultStore);
  auto lease = std::make_shared<double>(30);
  auto attempts = std::make_shared<unsigned>(3);
  auto commit_window = std::make_shared<double>(8);
  auto logging = std::make_shared<LogOptions>();
  auto key = std::make_shared<std::string>();
  auto allow_workers = std::make_shared<std::vector<std::string>>();
  auto allow_clients = std::make_shared<std::vector<std::string>>();
  auto admin_clients = std::make_shared<std::vector<std::string>>();
  auto insecure = std::make_shared<bool>(false);
  auto http = std::make_shared<std::string>();
  config->listen = kDefaultEndpoint;
  auto* cmd = app.add_subcommand(
      "coordinator",
      "Run the coordinator: workers and clients connect to it; trials are scheduled, leased and "
      "reconciled into its store, where every state change is an event first");
  cmd->add_option("--store", *store, "The store directory (runs and the orchestration log)")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_option("--listen", config->listen, "The endpoint to bind")->capture_default_str();
  cmd->add_option("--lease", *lease, "Seconds a lease lasts without a heartbeat")
      ->capture_default_str();
  cmd->add_option("--max-attempts", *attempts, "Attempts of a trial before it is abandoned")
      ->capture_default_str();
  cmd->add_option("--commit-window", *commit_window,
                  "Milliseconds a change waits for others to share its durable commit "
                  "(group commit; replies wait with it). 0: commit every turn")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--max-queued", config->max_queued,
                  "Trials queued over every job, at most; a submission that would pass it is "
                  "refused whole")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  cmd->add_option("--max-worker-slots", config->scheduler.max_worker_slots,
                  "Slots a worker may offer, at most: a worker claiming more is refused, so no "
                  "worker can be leased the whole queue")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  cmd->add_option("--key", *key,
                  "The coordinator's CurveZMQ keypair file (forktrial keygen): the endpoint then "
                  "speaks CURVE only, and admits only the listed keys");
  cmd->add_option("--allow-workers", *allow_workers,
                  "A file of public keys that may join as workers, one a line (cat *.pub)");
  cmd->add_option("--allow-clients", *allow_clients,
                  "A file of public keys that may submit, and cancel and read the jobs they "
                  "submitted, one a line");
  cmd->add_option("--admin-clients", *admin_clients,
                  "A file of public keys of administrators: clients that may also cancel and "
                  "read every other client's jobs, one a line");
  cmd->add_flag("--insecure", *insecure,
                "Listen on a non-loopback endpoint without keys: anyone who reaches it may "
                "submit code to run, or join as a worker");
  add_http_option(cmd, *http,
                  "/healthz and /readyz (the store takes writes) for an orchestrator's probes, "
                  "/metrics for Prometheus, and the status page / with its JSON under /api/");
  logging->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial keygen /etc/forktrial/coordinator.key",
      "forktrial coordinator --store /srv/ft --listen tcp://0.0.0.0:7600 \\",
      "    --key /etc/forktrial/coordinator.key \\",
      "    --allow-workers /etc/forktrial/workers.allow --allow-clients "
      "/etc/forktrial/clients.allow",
  }));
  cmd->callback([=] {
    config->store = *store;
    config->http = http_address(*http);
    config->scheduler.lease_duration =
        std::chrono::milliseconds(static_cast<std::int64_t>(*lease * 1000));
    config->scheduler.worker_timeout = config->scheduler.lease_duration;
    config->scheduler.max_attempts = *attempts;
    config->commit_window =
        std::chrono::microseconds(static_cast<std::int64_t>(*commit_window * 1000));
    const Log log = logging->make("coordinator");
    if (!key->empty()) {
      auto own = transport::read_keypair(*key);
      if (!own) throw CommandFailed("--key: " + own.error().message + kKeygenAdvice, kUsageError);
      config->curve_key = *own;
      for (const auto& [files, role] : {std::pair{allow_workers, transport::Role::worker},
                                        std::pair{allow_clients, transport::Role::client}}) {
        for (const auto& file : *files) {
          auto added = transport::add_allow_list(config->allowed, file, role);
          if (!added) throw CommandFailed(added.error().message, kUsageError);
        }
      }
      for (const auto& file : *admin_clients) {
        auto added =
            transport::add_allow_list(config->allowed, file, transport::Role::client, true);
        if (!added) throw CommandFailed(added.error().message, kUsageError);
      }
      if (config->allowed.empty()) {
        throw CommandFailed(
            "--key admits only listed keys, and none is listed: give "
            "--allow-workers and --allow-clients files of public keys",
            kUsageError);
      }
    } else if (!allow_workers->empty() || !allow_clients->empty() || !admin_clients->empty()) {
      throw CommandFailed(
          "--allow-workers, --allow-clients and --admin-clients need --key (the coordinator's "
          "keypair): without it nothing is authenticated",
          kUsageError);
    } else if (!transport::endpoint_is_local(config->listen)) {
      if (!*insecure) {
        throw CommandFailed(
            "refusing to listen on " + config->listen +
                " without keys: anyone who reaches it could submit code to run or join as a "
                "worker. Give --key with --allow-workers and --allow-clients (forktrial keygen "
                "makes keys), or --insecure to run open anyway",
            kUsageError);
      }
      const std::string warning =
          "INSECURE: listening on " + config->listen +
          " without keys (--insecure): anyone who reaches this endpoint may submit code to run, "
          "read results, or join as a worker";
      std::fprintf(stderr, "forktrial coordinator: %s\n", warning.c_str());
      log(LogLevel::warn, warning);
    }
    sandbox::Cancellation stop;
    StopSignals signals(stop);
    coordinator::run_coordinator(*config, stop, log);
  });
}

void add_worker(CLI::App& app) {
  auto config = std::make_shared<worker::WorkerConfig>();
  auto cache = std::make_shared<std::string>("./forktrial-cache");
  auto cache_size = std::make_shared<std::string>("4G");
  auto logging = std::make_shared<LogOptions>();
  auto endpoint = std::make_shared<std::string>();
  auto keys = std::make_shared<KeyOptions>();
  auto http = std::make_shared<std::string>();
  auto python = std::make_shared<std::string>("python3");
  auto* cmd = app.add_subcommand(
      "worker",
      "Run a worker: it checks that trial children can start here (preflight), joins the "
      "coordinator, and runs the trials it pulls, one per slot, each in a fresh child. It "
      "offers the lua executor, and activegraph's (for activegraph Python packs) when "
      "activegraph imports with --python and its trial child answers; the coordinator leases "
      "it only trials it can run");
  cmd->add_option("--connect", *endpoint, "The coordinator's endpoint (env FORKTRIAL_COORDINATOR)");
  cmd->add_option("--cache", *cache, "Directory of the blob cache and materialized bundles")
      ->capture_default_str();
  cmd->add_option("--cache-size", *cache_size, "The cache's byte cap (e.g. 4G)")
      ->capture_default_str();
  cmd->add_option("--slots", config->slots, "Trials run at once")->capture_default_str();
  cmd->add_option("--prefetch", config->prefetch,
                  "Most assignments held beyond the slots, ready for a slot that frees: as many "
                  "as cover 50 ms of recent trials, at least one (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0u, coordinator::Scheduler::kMaxPrefetch));
  cmd->add_option("--id", config->worker_id, "The worker's name (default: host-pid)");
  cmd->add_option("--send-queue", config->send_queue,
                  "Messages held for the coordinator while it does not take them; past it a "
                  "message waits to be sent again, and the worker says so")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  add_isolation_option(cmd, config->child.isolation);
  cmd->add_option("--python", *python,
                  "the interpreter activegraph packs run with (a path, or a name on PATH); "
                  "without activegraph importable there the worker offers lua alone")
      ->capture_default_str();
  add_http_option(
      cmd, *http,
      "/healthz and /readyz (the coordinator welcomed it) for an orchestrator's probes, and "
      "/metrics for Prometheus");
  keys->add_to(cmd);
  logging->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial worker --connect tcp://coord:7600 --cache /var/cache/ft --slots 8",
      "forktrial worker --connect tcp://coord:7600 --isolation strict",
      "forktrial worker --connect tcp://coord:7600 --python /opt/ag/bin/python3",
  }));
  cmd->callback([=] {
    if (endpoint->empty()) *endpoint = default_endpoint();
    config->coordinator = *endpoint;
    config->http = http_address(*http);
    config->keys = keys->load();
    config->cache_dir = *cache;
    auto bytes = sandbox::parse_byte_size(*cache_size);
    if (!bytes) throw CommandFailed("--cache-size: " + bytes.error().message, kUsageError);
    config->cache_bytes = *bytes;
    if (config->slots == 0) throw CommandFailed("--slots: give at least 1", kUsageError);
    if (config->worker_id.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      config->worker_id = std::string(host) + "-" + std::to_string(::getpid());
    }
    const Log log = logging->make("worker");
    // Handled from here: a stop that comes while the probes below run (a
    // cluster manager cancelling a worker it just started) ends the worker
    // cleanly instead of killing it.
    sandbox::Cancellation stop;
    StopSignals signals(stop);
    try {
      config->preflight_warnings = sandbox::preflight(sandbox::default_preflight_limits(),
                                                      std::chrono::seconds(30), config->child);
    } catch (const std::exception& e) {
      throw CommandFailed(std::string("this host cannot run trials, so the worker does not "
                                      "join: ") +
                          e.what());
    }
    for (const auto& warning : config->preflight_warnings) log(LogLevel::warn, warning);
    config->child.python = *python;
    config->executors = {{"lua", ""}};
    auto activegraph = sandbox::find_activegraph(*python);
    std::optional<Status> activegraph_problem =
        activegraph ? sandbox::activegraph_preflight(*activegraph) : activegraph.error();
    if (activegraph_problem) {
      log(LogLevel::info, "not offering the activegraph executor: " + activegraph_problem->message);
    } else {
      log(LogLevel::info,
          "offering the activegraph executor: activegraph " +
              (activegraph->version.empty() ? "(no version)" : activegraph->version) + " with " +
              activegraph->python.string());
      config->executors.push_back({"activegraph", activegraph->version});
      config->child.activegraph = *activegraph;
    }
    const sandbox::LocalSubprocessExecutor executor(config->child);
    ordered_json isolation{
        {"level", std::string(sandbox::isolation_name(executor.isolation().level))}};
    for (const auto& [name, guarantee] :
         {std::pair{"process", executor.isolation().process},
          {"filesystem", executor.isolation().filesystem},
          {"network", executor.isolation().network},
          {"syscalls", executor.isolation().syscalls},
          {"environment", executor.isolation().environment},
          {"security_sandbox", executor.isolation().security_sandbox}}) {
      isolation[name] = {{"provided", guarantee.provided}, {"how", guarantee.how}};
    }
    config->isolation = isolation.dump();
    config->stop_reason = [] {
      const int signal = stop_signal_received();
      return signal == 0 ? std::string("stopped")
                         : "stopped by SIG" + std::string(::sigabbrev_np(signal));
    };
    const int code = worker::run_worker(*config, stop, log);
    if (code != 0) throw ExitStatus(code);
  });
}

// ---- clients

// Why the job's queued trials are not leased, as the coordinator says; none
// when nothing stops them.
std::optional<std::string> waiting(const ordered_json& status) {
  const auto reason = status.find("waiting");
  if (reason == status.end() || !reason->is_string()) return std::nullopt;
  return terminal_text(reason->get<std::string>());
}

// "2h05m", "3m02s", "12s": a span of time as a person reads it.
std::string span_text(std::int64_t millis) {
  const std::int64_t seconds = std::max<std::int64_t>(0, (millis + 500) / 1000);
  char text[32];
  if (seconds >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(seconds / 3600),
                  static_cast<long long>(seconds / 60 % 60));
  } else if (seconds >= 60) {
    std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(seconds / 60),
                  static_cast<long long>(seconds % 60));
  } else {
    std::snprintf(text, sizeof text, "%llds", static_cast<long long>(seconds));
  }
  return text;
}

// The pace of a job: its rate, its time so far (or in all), and an estimate
// of the time left at the recent rate; "" when the status has no times.
std::string pace_text(const ordered_json& status) {
  const auto submitted = status.find("submitted_at");
  if (submitted == status.end() || !submitted->is_string()) return "";
  const auto start = parse_timestamp(submitted->get<std::string>());
  if (!start) return "";
  const double rate = status.value("throughput", 0.0);
  std::string text;
  if (rate > 0) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.1f/s", rate);
    text = shown;
  }
  const auto finished = status.find("finished_at");
  if (finished != status.end() && finished->is_string()) {
    if (const auto end = parse_timestamp(finished->get<std::string>())) {
      return text + (text.empty() ? "" : ", ") + "took " + span_text(*end - *start);
    }
  }
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  text += (text.empty() ? "" : ", ") + span_text(now - *start) + " elapsed";
  const std::uint64_t left =
      status.value("total", std::uint64_t{0}) -
      std::min(status.value("total", std::uint64_t{0}), status.value("done", std::uint64_t{0}));
  if (rate > 0 && left > 0) {
    text += ", ~" + span_text(static_cast<std::int64_t>(1000.0 * left / rate)) + " left";
  }
  return text;
}

std::string progress_line(const ordered_json& status) {
  const std::uint64_t total = status["total"];
  const std::uint64_t done = status["done"];
  // The bar fills with the trials that have a result: a cancelled job's
  // dropped trials are done, and fill none of it.
  const std::uint64_t reconciled = status["status"].value("reconciled", done);
  const int width = 30;
  const int filled = total == 0 ? width : static_cast<int>(width * reconciled / total);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  std::string line = "[" + bar + "] " + std::to_string(done) + "/" + std::to_string(total);
  for (const auto& [name, count] : status["outcomes"].items()) {
    if (count.get<std::uint64_t>() > 0) line += "  " + name + " " + count.dump();
  }
  const std::uint64_t abandoned = status["status"]["abandoned"];
  if (abandoned > 0) line += "  abandoned " + std::to_string(abandoned);
  if (const std::string pace = pace_text(status); !pace.empty()) line += "  (" + pace + ")";
  const std::string state = status.value("state", "");
  if (state == "cancelled") {
    line += "  CANCELLED (" + status["status"]["cancelled"].dump() + " trials dropped)";
  } else if (!state.empty()) {
    line += "  " + state;
  }
  if (status.contains("store_full")) {
    line += "  PAUSED: the coordinator's store is full";
  } else if (status.contains("disk_warning")) {
    line += "  WARNING: the coordinator's store is nearly out of room";
  }
  if (waiting(status)) line += "  WAITING";
  return line;
}

// A coordinator whose store is full says so in its status: said once per
// command, on stderr, with the reason.
void say_if_store_full(const ordered_json& status) {
  static bool said = false;
  if (said || !status.contains("store_full")) return;
  said = true;
  std::fprintf(stderr,
               "forktrial: the coordinator's store is full (%s): it leases nothing and takes no "
               "job until its disk has room; nothing committed is lost, and it resumes by "
               "itself\n",
               terminal_text(status["store_full"].get<std::string>()).c_str());
}

// A coordinator whose store's disk is nearly full warns before it fills (and
// pauses): said once per command, on stderr, with what to do.
void say_if_disk_warning(const ordered_json& status) {
  static bool said = false;
  const auto warning = status.find("disk_warning");
  if (said || warning == status.end() || !warning->is_string()) return;
  said = true;
  std::fprintf(stderr, "forktrial: WARNING: the coordinator's store is nearly out of room: %s\n",
               terminal_text(warning->get<std::string>()).c_str());
}

// Polls until the job is finished; the final status.
// The exit status of a wait that ran out of --max-wait with the job still
// going (0 and 1 are the job's own: every trial reconciled, or not).
constexpr int kWaitExpired = 3;

// Polls the job's status until it is finished, or until `max_wait` seconds
// have passed (0: no limit); the last status, and whether it is finished.
std::pair<ordered_json, bool> wait_for(coordinator::Client& client, const std::string& job,
                                       bool progress, double max_wait) {
  const bool tty = progress && ::isatty(STDERR_FILENO);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(max_wait));
  std::string said_waiting;
  for (;;) {
    ordered_json status = client.status(job);
    if (tty) std::fprintf(stderr, "\r%s", progress_line(status).c_str());
    if (!tty) say_if_store_full(status);
    if (!tty) say_if_disk_warning(status);
    // Each reason once, when it starts: a job that cannot progress says why.
    if (const auto reason = waiting(status); progress && reason && *reason != said_waiting) {
      std::fprintf(stderr, "%swaiting: %s\n", tty ? "\n" : "", reason->c_str());
      said_waiting = *reason;
    } else if (!reason) {
      said_waiting.clear();
    }
    const bool finished = status["finished"].get<bool>();
    if (finished || (max_wait > 0 && std::chrono::steady_clock::now() >= until)) {
      if (tty) std::fprintf(stderr, "\n");
      return {std::move(status), finished};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ordered_json summary_of(const ordered_json& status) {
  ordered_json out{{"job", status["job"]}, {"total", status["total"]}};
  for (const auto& [name, count] : status["status"].items()) out[name] = count;
  for (const auto& [name, count] : status["outcomes"].items()) out[name] = count;
  out["cancelled"] = status["cancelled"];
  return out;
}

void print_summary(const ordered_json& status, bool json) {
  if (json) {
    std::printf("%s\n", summary_of(status).dump().c_str());
    return;
  }
  std::printf("job        %s\n", status["job"].get<std::string>().c_str());
  std::printf("trials     %s\n", status["total"].dump().c_str());
  for (const auto& [name, count] : status["status"].items()) {
    if (count.get<std::uint64_t>() > 0)
      std::printf("  %-22s %s\n", name.c_str(), count.dump().c_str());
  }
  std::printf("outcomes\n");
  for (const auto& [name, count] : status["outcomes"].items()) {
    std::printf("  %-22s %s\n", name.c_str(), count.dump().c_str());
  }
}

// wait's exit status: 0 when every trial was reconciled.
int wait_status(const ordered_json& status) {
  const bool all = status["status"]["reconciled"] == status["total"];
  return all && !status["cancelled"].get<bool>() ? 0 : 1;
}

// Prints the summary and ends the command with wait's exit status.
void end_wait(const std::pair<ordered_json, bool>& waited, double max_wait, bool json) {
  const auto& [status, finished] = waited;
  print_summary(status, json);
  if (!finished) {
    std::fprintf(stderr,
                 "forktrial: job %s is not finished after %g s (--max-wait); it goes on at the "
                 "coordinator: wait for it again, or cancel it\n",
                 status["job"].get<std::string>().c_str(), max_wait);
    throw ExitStatus(kWaitExpired);
  }
  if (const int code = wait_status(status); code != 0) throw ExitStatus(code);
}

// Uploads what the coordinator lacks and submits the batch, whose trials and
// candidates it empties on the way: each specification is let go as soon as
// its text is made, so that a million of them are not held twice.
coordinator::SubmittedJob submit_batch(coordinator::Client& client, coordinator::Batch& batch) {
  std::map<std::string, coordinator::BundleBlob> bundles;  // by directory
  std::map<std::string, std::string> archives;             // digest hex -> bytes
  for (const auto& pack : batch.packs) {
    auto archive = pack::archive_pack(pack.root_dir);
    if (!archive)
      throw CommandFailed("cannot archive " + pack.root_dir + ": " + archive.error().message);
    if (archive->bundle_hash != pack.bundle_hash) {
      throw CommandFailed(pack.root_dir + " changed while the batch was read (it hashed to " +
                          pack.bundle_hash.str() + ", now " + archive->bundle_hash.str() +
                          "); submit again");
    }
    const Digest digest = Sha256::of(archive->bytes);
    bundles[pack.root_dir] = {pack.bundle_hash, digest};
    archives[digest.hex()] = std::move(archive->bytes);
  }
  std::vector<Digest> wanted;
  for (const auto& [dir, bundle] : bundles) wanted.push_back(bundle.archive);
  for (const auto& digest : client.find_missing(wanted)) {
    client.put_blob(digest, archives.at(digest.hex()));
  }
  std::vector<std::string> trials;
  trials.reserve(batch.trials.size());
  const auto bundle_of = [&](sandbox::PackSource& pack) {
    pack.root_dir = wire::bundle_root(bundles.at(pack.root_dir).archive);
  };
  for (std::size_t i = 0; i < batch.trials.size(); ++i) {
    sandbox::TrialSpecification spec = std::move(batch.trials[i]);
    batch.trials[i] = {};
    bundle_of(spec.candidate);
    for (auto& extra : spec.extra_packs) bundle_of(extra);
    trials.push_back(ordered_json{{"candidate", std::move(batch.candidates[i])},
                                  {"spec", ordered_json::parse(sandbox::to_canonical_json(spec))}}
                         .dump());
  }
  batch.trials.clear();
  batch.trials.shrink_to_fit();
  batch.candidates.clear();
  batch.candidates.shrink_to_fit();
  std::vector<coordinator::BundleBlob> list;
  for (const auto& [dir, bundle] : bundles) list.push_back(bundle);
  try {
    return client.submit(batch.name, batch.priority, trials, list,
                         coordinator::Client::kMaxPartBytes, batch.retention);
  } catch (const Error& e) {
    // The coordinator says what it lacks; what to do is the command line's.
    const std::string why = e.what();
    if (why.find(" in the coordinator's store ") == std::string::npos) throw;
    throw Error(e.code(),
                why +
                    "\nimport each parent run the coordinator lacks into its store "
                    "first, on its host: forktrial run import FILE --store STORE --id RUN");
  }
}

coordinator::Batch read_batch_or_fail(const std::string& file) {
  auto batch = coordinator::read_batch_file(file);
  if (!batch) {
    std::string message = file + " has " + std::to_string(batch.error().list.size()) +
                          (batch.error().list.size() == 1 ? " problem" : " problems") +
                          "; nothing was submitted:";
    for (const auto& problem : batch.error().list) message += "\n  " + problem;
    message +=
        "\n`forktrial pack check DIR` lists every problem of a pack directory, `forktrial pack "
        "hash DIR` prints the pin to expect, and `forktrial run ls` and `forktrial run events "
        "RUN` list the parent runs and the events to fork at";
    throw CommandFailed(message, kUsageError);
  }
  return std::move(*batch);
}

// Every result of the job, page by page.
std::vector<ordered_json> all_results(coordinator::Client& client, const std::string& job) {
  std::vector<ordered_json> out;
  std::uint32_t next = 0;
  for (;;) {
    auto page = client.results(job, next, 1000);
    for (const auto& line : page.lines) out.push_back(ordered_json::parse(line));
    if (page.next >= page.total || page.lines.empty()) break;
    next = page.next;
  }
  return out;
}

constexpr const char* kResultFields[] = {
    "trial",     "candidate", "pin",         "scenario",        "at",
    "status",    "outcome",   "fork_run_id", "events_appended", "behavior_failures",
    "exit_code", "detail",    "worker",      "attempts",        "duration_ms"};

std::string csv_cell(const ordered_json& value) {
  std::string text = value.is_string() ? value.get<std::string>()
                     : value.is_null() ? ""
                                       : value.dump();
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

void print_results(const std::vector<ordered_json>& results, const std::string& format,
                   const std::string& by) {
  if (by == "candidate") {
    coordinator::CandidateTally tally;
    for (const auto& r : results) tally.add_result(r);
    const auto ranked = tally.ranked();
    if (format == "json") {
      for (const auto& rank : ranked) {
        std::printf("%s\n", coordinator::candidate_rank_json(rank).dump().c_str());
      }
      return;
    }
    // COMPLETED is the share of its finished trials, the ranking's key;
    // FINISHED/TRIALS is its progress.
    std::printf("%-4s %-24s %7s %8s %9s  %s\n", "RANK", "CANDIDATE", "TRIALS", "FINISHED",
                "COMPLETED", "OUTCOMES");
    int place = 0;
    for (const auto& rank : ranked) {
      std::string outcomes;
      for (const auto& [outcome, count] : rank.outcomes) {
        outcomes += outcome + " " + std::to_string(count) + "  ";
      }
      std::printf("%-4d %-24s %7llu %8llu %8.1f%%  %s\n", ++place,
                  terminal_text(rank.candidate).c_str(),
                  static_cast<unsigned long long>(rank.trials),
                  static_cast<unsigned long long>(rank.finished()), 100.0 * rank.completed_share(),
                  outcomes.c_str());
    }
    return;
  }
  if (format == "json") {
    for (const auto& r : results) std::printf("%s\n", r.dump().c_str());
    return;
  }
  if (format == "csv") {
    std::string header;
    for (const char* field : kResultFields)
      header += std::string(header.empty() ? "" : ",") + field;
    std::printf("%s\n", header.c_str());
    for (const auto& r : results) {
      std::string line;
      bool first = true;
      for (const char* field : kResultFields) {
        line += (first ? "" : ",") + csv_cell(r.contains(field) ? r[field] : ordered_json());
        first = false;
      }
      std::printf("%s\n", line.c_str());
    }
    return;
  }
  std::printf("%-26s %-16s %-22s %-9s %-22s %6s %8s\n", "TRIAL", "CANDIDATE", "SCENARIO", "AT",
              "OUTCOME", "EVENTS", "FAILURES");
  for (const auto& r : results) {
    auto text = [](const ordered_json& v) {
      return terminal_text(v.is_string() ? v.get<std::string>() : v.is_null() ? "-" : v.dump());
    };
    std::printf("%-26s %-16s %-22s %-9s %-22s %6s %8s\n", text(r["trial"]).c_str(),
                text(r["candidate"]).c_str(), text(r["scenario"]).c_str(), text(r["at"]).c_str(),
                (r["outcome"].is_string() ? text(r["outcome"]) : text(r["status"])).c_str(),
                text(r["events_appended"]).c_str(), text(r["behavior_failures"]).c_str());
  }
}

struct ClientOptions {
  std::string endpoint;
  double timeout = 10;
  bool json = false;
  KeyOptions keys;

  void add_to(CLI::App* cmd) {
    add_endpoint(cmd, endpoint);
    cmd->add_option("--timeout", timeout, "Seconds to wait for each answer")->capture_default_str();
    cmd->add_flag("--json", json, "Print JSON for scripts instead of text");
    keys.add_to(cmd);
  }
  coordinator::Client connect() const {
    return coordinator::Client(endpoint,
                               std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000)),
                               keys.load());
  }
};

void add_submit(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto file = std::make_shared<std::string>();
  auto wait = std::make_shared<bool>(false);
  auto max_wait = std::make_shared<double>(0);
  auto* cmd = app.add_subcommand(
      "submit",
      "Submit a batch file (a TOML matrix or JSON Lines of trial specifications); "
      "uploads only the bundles the coordinator lacks; prints the job id");
  cmd->add_option("FILE", *file, "The batch file")->required();
  cmd->add_flag("--wait", *wait, "Wait for the job, with progress, then print a summary");
  cmd->add_option("--max-wait", *max_wait,
                  "With --wait: give up waiting after this many seconds (exit 3; the job goes "
                  "on). 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial submit nightly.toml --coordinator tcp://coord:7600 --wait",
      "forktrial submit nightly.toml --json            # {\"job\": ID, \"total\": N}",
  }));
  cmd->callback([=] {
    auto batch = read_batch_or_fail(*file);
    auto client = o->connect();
    const auto job = submit_batch(client, batch);
    if (!*wait) {
      if (o->json) {
        std::printf("%s\n", ordered_json{{"job", job.job}, {"total", job.total}}.dump().c_str());
      } else {
        std::printf("%s\n", job.job.c_str());
      }
      return;
    }
    if (!o->json)
      std::fprintf(stderr, "job %s: %llu trials\n", job.job.c_str(),
                   static_cast<unsigned long long>(job.total));
    end_wait(wait_for(client, job.job, true, *max_wait), *max_wait, o->json);
  });
}

// The jobs of a `status` answer that pass the filters: a state, submitted
// at or after `since` (an ISO-8601 time, or a span back from now such as
// 2h), the `limit` most recently submitted (0: all), oldest first.
ordered_json filtered_jobs(const ordered_json& jobs, const std::string& state,
                           const std::string& since, std::size_t limit) {
  std::optional<UnixMillis> from;
  if (!since.empty()) {
    if (auto at = parse_timestamp(since)) {
      from = *at;
    } else if (auto back = sandbox::parse_duration_seconds(since); back && *back >= 0) {
      const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      from = now - static_cast<UnixMillis>(*back * 1000);
    } else {
      throw CommandFailed("--since: \"" + since +
                              "\" is neither an ISO-8601 time (2026-12-03T10:00:00Z) nor a span "
                              "back from now (30m, 2h)",
                          kUsageError);
    }
  }
  ordered_json kept = ordered_json::array();
  for (const auto& j : jobs) {
    if (!state.empty() && j.value("state", "") != state) continue;
    if (from) {
      const auto at = parse_timestamp(j.value("submitted_at", ""));
      if (!at || *at < *from) continue;
    }
    kept.push_back(j);
  }
  if (limit > 0 && kept.size() > limit) {
    std::stable_sort(kept.begin(), kept.end(), [](const ordered_json& a, const ordered_json& b) {
      return a.value("submitted_at", "") < b.value("submitted_at", "");
    });
    kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(limit));
  }
  return kept;
}

void add_status(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto state = std::make_shared<std::string>();
  auto since = std::make_shared<std::string>();
  auto limit = std::make_shared<std::size_t>(0);
  auto* cmd = app.add_subcommand(
      "status",
      "Jobs and their progress (one job with JOB): each job's state (queued, running, "
      "finished, cancelled or abandoned), its trials done, its outcomes, and why its queued "
      "trials wait when nothing can run them");
  cmd->add_option("JOB", *job, "A job id");
  cmd->add_option("--state", *state, "Only the jobs in this state")
      ->check(CLI::IsMember({"queued", "running", "finished", "abandoned", "cancelled"}));
  cmd->add_option("--since", *since,
                  "Only the jobs submitted since then: an ISO-8601 time, or a span back from "
                  "now (30m, 2h)");
  cmd->add_option("--limit", *limit, "Only the N most recently submitted jobs (0: all)")
      ->capture_default_str();
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial status --coordinator tcp://coord:7600",
      "forktrial status --state running --since 2h --limit 20",
      "forktrial status job_1f2e3d4c5b6a7980",
      "forktrial status job_1f2e3d4c5b6a7980 --json   # counts by status and outcome, state",
  }));
  cmd->callback([=] {
    if (!job->empty() && (!state->empty() || !since->empty() || *limit > 0)) {
      throw CommandFailed(
          "--state, --since and --limit filter the list of jobs; give them "
          "without a JOB",
          kUsageError);
    }
    auto client = o->connect();
    auto status = client.status(*job);
    if (job->empty()) status["jobs"] = filtered_jobs(status["jobs"], *state, *since, *limit);
    if (o->json) {
      std::printf("%s\n", status.dump().c_str());
      return;
    }
    say_if_store_full(status);
    say_if_disk_warning(status);
    if (!job->empty()) {
      std::printf("%s\n", progress_line(status).c_str());
      if (const auto reason = waiting(status)) std::printf("waiting: %s\n", reason->c_str());
      return;
    }
    std::printf("%-22s %-20s %8s %8s  %s\n", "JOB", "NAME", "TRIALS", "DONE", "PROGRESS");
    for (const auto& j : status["jobs"]) {
      std::printf("%-22s %-20s %8s %8s  %s\n", j["job"].get<std::string>().c_str(),
                  terminal_text(j["name"].get<std::string>()).c_str(), j["total"].dump().c_str(),
                  j["done"].dump().c_str(), progress_line(j).c_str());
    }
    for (const auto& j : status["jobs"]) {
      if (const auto reason = waiting(j)) {
        std::printf("%s waiting: %s\n", j["job"].get<std::string>().c_str(), reason->c_str());
      }
    }
  });
}

void add_wait(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto max_wait = std::make_shared<double>(0);
  auto* cmd = app.add_subcommand(
      "wait",
      "Wait for a job, with progress; exits 0 when every trial was reconciled, 1 when "
      "any was abandoned or the job was cancelled, 3 when --max-wait ran out first");
  cmd->add_option("JOB", *job, "The job id")->required();
  cmd->add_option("--max-wait", *max_wait,
                  "Give up waiting after this many seconds (exit 3; the job goes on). 0: no "
                  "limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial wait job_1f2e3d4c5b6a7980",
      "forktrial wait job_1f2e3d4c5b6a7980 --max-wait 600 --json   # exit 3 after 10 minutes",
  }));
  cmd->callback([=] {
    auto client = o->connect();
    end_wait(wait_for(client, *job, true, *max_wait), *max_wait, o->json);
  });
}

void add_cancel(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "cancel",
      "Cancel a job: queued trials are dropped, running ones killed on their workers; a job "
      "that has finished is not cancelled");
  cmd->add_option("JOB", *job, "The job id")->required();
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial cancel job_1f2e3d4c5b6a7980",
      "forktrial cancel job_1f2e3d4c5b6a7980 --json   # the job's status after",
  }));
  cmd->callback([=] {
    auto client = o->connect();
    auto status = client.cancel(*job);
    if (o->json) {
      std::printf("%s\n", status.dump().c_str());
    } else {
      std::printf("cancelled %s: %s\n", job->c_str(), progress_line(status).c_str());
    }
  });
}

// Every result of `jobs` into the SQLite file `path`, a page per
// transaction; says what it wrote.
void export_results(coordinator::Client& client, const std::vector<std::string>& jobs,
                    const std::string& path) {
  ResultsDatabase database(path);
  std::uint64_t written = 0;
  for (const std::string& job : jobs) {
    const auto status = client.status(job);
    if (status.contains("jobs") && status["jobs"].is_array() && !status["jobs"].empty()) {
      database.add_job(status["jobs"][0]);
    } else {
      database.add_job(status);
    }
    std::uint32_t next = 0;
    for (;;) {
      auto page = client.results(job, next, 2000);
      database.add_results(page.lines);
      written += page.lines.size();
      std::fprintf(stderr, "results: %s: %u of %u\r", job.c_str(), page.next, page.total);
      if (page.next >= page.total || page.lines.empty()) break;
      next = page.next;
    }
    std::fprintf(stderr, "\n");
  }
  std::printf("wrote %llu results of %zu job(s) to %s (tables jobs and results)\n",
              static_cast<unsigned long long>(written), jobs.size(), path.c_str());
}

void add_results(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto jobs = std::make_shared<std::vector<std::string>>();
  auto csv = std::make_shared<bool>(false);
  auto by = std::make_shared<std::string>();
  auto sqlite = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "results",
      "Jobs' results, one per trial (--json: JSON Lines; --csv; --sqlite FILE: a SQLite "
      "database); --by candidate ranks candidates by the share of their finished trials that "
      "completed");
  cmd->add_option("JOB", *jobs, "The job ids")->required();
  auto* csv_flag = cmd->add_flag("--csv", *csv, "Print CSV");
  auto* by_option =
      cmd->add_option("--by", *by, "Aggregate: candidate")->check(CLI::IsMember({"candidate"}));
  cmd->add_option("--sqlite", *sqlite,
                  "Write the results into this SQLite file (created or updated: tables jobs and "
                  "results, one row per trial, the whole line in column line), a page at a time")
      ->excludes(csv_flag)
      ->excludes(by_option);
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial results job_1f2e3d4c5b6a7980 --by candidate",
      "forktrial results job_1f2e3d4c5b6a7980 --json > results.jsonl",
      "forktrial results job_1f2e3d4c5b6a7980 --csv > results.csv",
      "forktrial results job_1f2e3d4c5b6a7980 job_0a9b8c7d6e5f4a3b --sqlite results.db",
  }));
  cmd->callback([=] {
    auto client = o->connect();
    if (!sqlite->empty()) return export_results(client, *jobs, *sqlite);
    std::vector<ordered_json> results;
    for (const std::string& job : *jobs) {
      auto more = all_results(client, job);
      results.insert(results.end(), std::make_move_iterator(more.begin()),
                     std::make_move_iterator(more.end()));
    }
    print_results(results, o->json ? "json" : *csv ? "csv" : "text", *by);
  });
}

void add_import_to_coordinator(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto file = std::make_shared<std::string>();
  auto id = std::make_shared<std::string>();
  auto label = std::make_shared<std::string>();
  auto fork_of = std::make_shared<std::string>();
  auto at = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "import",
      "Import an activegraph JSON Lines run into the coordinator's store, so jobs can fork it "
      "(forktrial run import imports into a store on this machine)");
  cmd->add_option("FILE", *file, "The JSON Lines file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--id", *id, "The new run's id (default: generated)");
  cmd->add_option("--label", *label, "A label for the new run (default: the file name)");
  auto* parent = cmd->add_option("--fork-of", *fork_of,
                                 "Import the file as a fork of this run of the coordinator's "
                                 "store (with --at)");
  cmd->add_option("--at", *at, "The parent's event the fork branches after (with --fork-of)")
      ->needs(parent);
  parent->needs("--at");
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial import trace.jsonl --id run_chat --coordinator tcp://coord:7600",
      "forktrial import whatif.jsonl --fork-of run_chat --at evt_009 --json",
  }));
  cmd->callback([=] {
    std::ifstream in(*file, std::ios::binary);
    if (!in) throw CommandFailed("cannot read " + *file);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    // The client names the run, so that a resend after a lost answer finds
    // the run it made rather than making a second.
    std::string run_id = *id;
    if (run_id.empty()) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx",
                    static_cast<unsigned long long>(real_world().random64()));
      run_id = std::string("run_") + hex;
    }
    const std::string name = label->empty() ? fs::path(*file).filename().string() : *label;
    auto client = o->connect();
    ordered_json run;
    try {
      run = client.import_run(bytes, run_id, terminal_safe(name), *fork_of, *at);
    } catch (const Error& e) {
      throw CommandFailed("cannot import " + *file + " into the coordinator's store: " + e.what() +
                          "; nothing was imported");
    }
    if (o->json) {
      std::printf("%s\n", run.dump().c_str());
      return;
    }
    std::printf("%s\n", run["id"].get<std::string>().c_str());
    std::fprintf(stderr, "imported %s events into the coordinator's store as %s\n",
                 run["events"].dump().c_str(), run["id"].get<std::string>().c_str());
  });
}

void add_workers(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  auto* cmd = app.add_subcommand(
      "workers", "The workers the coordinator knows: alive, slots, running, executors");
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial workers --coordinator tcp://coord:7600",
      "forktrial workers --json   # with each worker's isolation and degraded nets",
  }));
  cmd->callback([=] {
    auto client = o->connect();
    auto workers = client.workers();
    if (o->json) {
      std::printf("%s\n", workers.dump().c_str());
      return;
    }
    std::printf("%-28s %-6s %6s %8s  %-24s  %s\n", "WORKER", "ALIVE", "SLOTS", "RUNNING",
                "LAST SEEN", "EXECUTORS");
    for (const auto& w : workers["workers"]) {
      std::string executors;
      for (const auto& e : w.value("executors", ordered_json::array())) {
        if (!executors.empty()) executors += ",";
        executors += e.value("name", "?");
        if (const std::string version = e.value("version", ""); !version.empty()) {
          executors += " " + version;
        }
      }
      std::printf("%-28s %-6s %6s %8s  %-24s  %s\n",
                  terminal_text(w["worker"].get<std::string>()).c_str(),
                  w["alive"].get<bool>() ? "yes" : "no", w["slots"].dump().c_str(),
                  w["running"].dump().c_str(), w["last_seen"].get<std::string>().c_str(),
                  terminal_text(executors).c_str());
    }
  });
}

// ---- batch: a coordinator and workers as child processes of this one.

// The environment of the batch's own daemons: this one's, without what
// would point them elsewhere. Its coordinator has no keys, so keys meant for
// a cluster would keep its workers out; an HTTP address would be taken by
// the first daemon and refused to the others.
std::vector<std::string> batch_daemon_environment() {
  static constexpr std::string_view kDropped[] = {
      "FORKTRIAL_KEY=", "FORKTRIAL_COORDINATOR_KEY=", "FORKTRIAL_COORDINATOR=", "FORKTRIAL_HTTP="};
  std::vector<std::string> kept;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (std::none_of(std::begin(kDropped), std::end(kDropped),
                     [&](std::string_view name) { return entry.starts_with(name); })) {
      kept.emplace_back(entry);
    }
  }
  return kept;
}

class Daemon {
 public:
  // Started with PR_SET_PDEATHSIG: should this process die without stopping
  // it (SIGKILL), it is sent SIGTERM rather than left running.
  explicit Daemon(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<std::string> environment = batch_daemon_environment();
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw SystemError("fork", errno);
    if (pid_ == 0) {
      // Async-signal-safe calls only, between fork and exec.
      if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(127);
      ::execve(self.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
  }
  ~Daemon() { stop(); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Asks it to stop (SIGTERM); stop() then waits for it.
  void terminate() {
    if (running()) ::kill(pid_, SIGTERM);
  }
  // Stops it: SIGTERM, then SIGKILL if it is still there after 5 s.
  void stop() {
    terminate();
    for (int i = 0; i < 1000 && running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    pid_ = 0;
  }
  // Whether it has not exited; one that has is reaped, and its status kept.
  bool running() {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, &status_, WNOHANG) == 0) return true;
    pid_ = 0;
    return false;
  }
  // How it ended ("exit 1", "signal 9"), once it has.
  std::string how_it_ended() const {
    if (WIFSIGNALED(status_)) return "signal " + std::to_string(WTERMSIG(status_));
    return "exit " + std::to_string(WEXITSTATUS(status_));
  }

 private:
  pid_t pid_ = 0;
  int status_ = 0;
};

void add_batch(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto store = std::make_shared<std::string>(kDefaultStore);
  auto workers = std::make_shared<unsigned>(2);
  auto slots = std::make_shared<unsigned>(1);
  auto json = std::make_shared<bool>(false);
  auto by = std::make_shared<std::string>();
  auto log_level = std::make_shared<std::string>("warn");
  auto isolation = std::make_shared<sandbox::Isolation>(sandbox::Isolation::standard);
  auto python = std::make_shared<std::string>("python3");
  auto* cmd = app.add_subcommand(
      "batch",
      "Run a batch file on this machine alone: a coordinator and N workers as local processes "
      "(the same code paths as a cluster), then print the results");
  cmd->add_option("FILE", *file, "The batch file")->required();
  cmd->add_option("--store", *store, "The store holding the batch's parent run")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_option("--workers", *workers, "Worker processes")->capture_default_str();
  cmd->add_option("--slots", *slots, "Slots per worker")->capture_default_str();
  cmd->add_option("--by", *by, "Aggregate the results: candidate")
      ->check(CLI::IsMember({"candidate"}));
  cmd->add_flag("--json", *json, "Results as JSON Lines, then the summary object");
  cmd->add_option("--log-level", *log_level, "The daemons' log level")->capture_default_str();
  add_isolation_option(cmd, *isolation);
  cmd->add_option("--python", *python,
                  "the interpreter the workers run activegraph packs with (a path, or a name on "
                  "PATH)")
      ->capture_default_str();
  cmd->footer(examples_footer({
      "forktrial batch nightly.toml --workers 2",
      "forktrial batch nightly.toml --by candidate",
      "forktrial batch nightly.toml --isolation strict",
  }));
  cmd->callback([=] {
    if (*workers == 0) throw CommandFailed("--workers: give at least 1", kUsageError);
    auto batch = read_batch_or_fail(*file);
    // activegraph packs need activegraph here: without it no local worker
    // could run them, and the batch would wait for ever.
    if (std::ranges::any_of(batch.trials, [](const sandbox::TrialSpecification& spec) {
          return pack::is_activegraph_pack(spec.candidate.root_dir);
        })) {
      auto activegraph = sandbox::find_activegraph(*python);
      const std::optional<Status> problem =
          activegraph ? sandbox::activegraph_preflight(*activegraph) : activegraph.error();
      if (problem) {
        throw CommandFailed(
            "the batch has activegraph packs, and activegraph's trial child "
            "cannot run here: " +
            problem->message +
            "\ninstall activegraph for that interpreter, or name another with "
            "--python; `forktrial preflight --python PY` checks");
      }
    }
    // A private directory (mkdtemp: mode 0700, a name nobody can guess or
    // take first): the endpoint in it has no keys, so only this user may
    // reach it.
    std::string pattern = (fs::temp_directory_path() / "forktrial-batch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw CommandFailed("cannot make a private directory for the batch's endpoint (" + pattern +
                          "): " + std::strerror(errno));
    }
    const fs::path scratch = pattern;
    struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
      }
    } cleanup{scratch};
    const std::string endpoint = "ipc://" + (scratch / "coordinator.sock").string();
    Daemon coordinator(std::vector<std::string>{"forktrial", "coordinator", "--store", *store,
                                                "--listen", endpoint, "--log-level", *log_level});
    std::vector<std::unique_ptr<Daemon>> pool;
    for (unsigned i = 0; i < *workers; ++i) {
      pool.push_back(std::make_unique<Daemon>(std::vector<std::string>{
          "forktrial", "worker", "--connect", endpoint, "--cache",
          (scratch / ("cache-" + std::to_string(i))).string(), "--slots", std::to_string(*slots),
          "--id", "local-" + std::to_string(i), "--log-level", *log_level, "--isolation",
          std::string(sandbox::isolation_name(*isolation)), "--python", *python}));
    }
    sandbox::Cancellation stop;
    StopSignals signals(stop);
    coordinator::Client client(endpoint, std::chrono::seconds(30));
    client.set_interrupted([&stop] { return stop.cancelled(); });
    const auto job = submit_batch(client, batch);
    if (!*json) {
      std::fprintf(stderr, "batch %s: job %s, %llu trials on %u workers\n", batch.name.c_str(),
                   job.job.c_str(), static_cast<unsigned long long>(job.total), *workers);
    }
    ordered_json status;
    const bool tty = !*json && ::isatty(STDERR_FILENO);
    for (;;) {
      status = client.status(job.job);
      if (tty) std::fprintf(stderr, "\r%s", progress_line(status).c_str());
      if (status["finished"].get<bool>() || stop.cancelled()) break;
      if (!coordinator.running()) {
        throw CommandFailed("the batch's coordinator died (" + coordinator.how_it_ended() +
                            "); its log is above");
      }
      if (std::none_of(pool.begin(), pool.end(), [](auto& w) { return w->running(); })) {
        std::string how;
        for (auto& worker : pool) how += (how.empty() ? "" : ", ") + worker->how_it_ended();
        throw CommandFailed("every worker of the batch died (" + how +
                            ") with trials left; their log is above");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (tty) std::fprintf(stderr, "\n");
    if (stop.cancelled()) {
      client.cancel(job.job);
      end_by(stop_signal_received());
    }
    const auto results = all_results(client, job.job);
    print_results(results, *json ? "json" : "text", *by);
    if (*json) {
      std::printf("%s\n", summary_of(status).dump().c_str());
    } else {
      std::printf("\n");
      print_summary(status, false);
    }
    for (auto& worker : pool) worker->terminate();
    for (auto& worker : pool) worker->stop();
    coordinator.stop();
    if (const int code = wait_status(status); code != 0) throw ExitStatus(code);
  });
}

}  // namespace

void add_keygen(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "keygen",
      "Write a CurveZMQ keypair for a coordinator, worker or client: FILE (secret, mode 0600) "
      "and FILE.pub (its public key, for the coordinator's allow lists or --coordinator-key)");
  cmd->add_option("FILE", *path, "Where to write the keypair")->required();
  cmd->add_flag("--force", *force, "Replace FILE and FILE.pub if they exist");
  cmd->add_flag("--json", *json, "Print {\"public_key\", \"keypair\", \"public_file\"}");
  cmd->footer(examples_footer({
      "forktrial keygen coordinator.key      # coordinator.key + coordinator.key.pub",
      "forktrial keygen worker-a.key && cat worker-*.key.pub > workers.allow",
  }));
  cmd->callback([=] {
    const transport::Keypair keypair = transport::generate_keypair();
    auto written = transport::write_keypair(*path, keypair, *force);
    if (!written) throw CommandFailed(written.error().message);
    const std::string pub = *path + ".pub";
    if (*json) {
      std::printf(
          "%s\n",
          ordered_json{{"public_key", keypair.public_key}, {"keypair", *path}, {"public_file", pub}}
              .dump()
              .c_str());
    } else {
      std::printf("%s\n", keypair.public_key.c_str());
      std::fprintf(stderr, "wrote %s (secret: keep it so) and %s\n", path->c_str(), pub.c_str());
    }
  });
}

void add_cluster_commands(CLI::App& app) {
  add_keygen(app);
  add_coordinator(app);
  add_worker(app);
  add_submit(app);
  add_status(app);
  add_wait(app);
  add_cancel(app);
  add_results(app);
  add_workers(app);
  add_import_to_coordinator(app);
  add_batch(app);
}

}  // namespace forktrial::tools
