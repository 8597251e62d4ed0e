// `forktrial coordinator | worker | batch`: trials sharded over ZeroMQ to
// workers, and the batch that runs the same thing on this machine alone.
// The coordinator's clients are in client_commands.cc.
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
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "coordinator/batch_file.h"
#include "coordinator/client.h"
#include "coordinator/server.h"
#include "pack/executor.h"
#include "sandbox/activegraph_child.h"
#include "sandbox/executor.h"
#include "sandbox/limit_units.h"
#include "sandbox/trial.h"
#include "store/writer_lock.h"
#include "tools/cli_support.h"
#include "tools/client_commands.h"
#include "tools/commands.h"
#include "tools/stop_signals.h"
#include "tools/store_access.h"
#include "tools/terminal.h"
#include "transport/curve.h"
#include "worker/worker.h"

extern char** environ;

namespace forktrial::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

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
  auto max_queued_bytes = std::make_shared<std::string>("4G");
  auto max_client_bytes = std::make_shared<std::string>("1G");
  cmd->add_option("--max-queued-bytes", *max_queued_bytes,
                  "Bytes of trial text the unfinished jobs may hold, at most (e.g. 4G); a "
                  "submission that would pass it is refused whole")
      ->capture_default_str();
  cmd->add_option("--max-client-bytes", *max_client_bytes,
                  "The same for one client key's jobs (all clients are one without keys)")
      ->capture_default_str();
  cmd->add_option("--max-worker-slots", config->scheduler.max_worker_slots,
                  "Slots a worker may offer, at most: a worker claiming more is refused, so no "
                  "worker can be leased the whole queue")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  cmd->add_option("--compact-log-after", config->compact_log_after,
                  "Compact the orchestration log (replace it by a snapshot of the live state) once "
                  "this many events, and at least 4 times the last snapshot's, follow that "
                  "snapshot: a restart then reads the live state, not the history. 0: never")
      ->capture_default_str();
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
  cmd->add_flag("--http-private", config->http_private,
                "The --http address is reachable by the operators alone: with client keys, the "
                "status page's /api/ (every client's jobs) is served there too, not only on "
                "loopback");
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
    for (auto [text, option, limit] :
         {std::tuple{max_queued_bytes, "--max-queued-bytes", &config->max_queued_bytes},
          std::tuple{max_client_bytes, "--max-client-bytes", &config->max_client_bytes}}) {
      auto bytes = sandbox::parse_byte_size(*text);
      if (!bytes)
        throw CommandFailed(std::string(option) + ": " + bytes.error().message, kUsageError);
      *limit = *bytes;
    }
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
  // Started in a process group of its own, with PR_SET_PDEATHSIG: should
  // this process die without stopping it (SIGKILL), it is sent SIGTERM
  // rather than left running.
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
      // A process group of its own: a terminal's Ctrl-C goes to the batch
      // alone, which cancels the job through this coordinator before it
      // stops the daemons.
      if (::setpgid(0, 0) != 0) ::_exit(127);
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
  auto no_cache = std::make_shared<bool>(false);
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
  cmd->add_flag("--no-cache", *no_cache,
                "Run every trial: answer none from the result cache of trials already run in "
                "this store (deterministic candidates), and keep none's result in it");
  cmd->footer(examples_footer({
      "forktrial batch nightly.toml --workers 2",
      "forktrial batch nightly.toml --by candidate",
      "forktrial batch nightly.toml --isolation strict",
  }));
  cmd->callback([=] {
    if (*workers == 0) throw CommandFailed("--workers: give at least 1", kUsageError);
    auto batch = read_batch_or_fail(*file);
    // A batch runs a coordinator of its own, and a store has one at a time.
    if (const auto holder = store::WriterLock::holder(*store)) {
      throw CommandFailed("the store " + *store + " is in use by a coordinator (" +
                          store::describe(*holder) +
                          "); a batch runs a coordinator of its own, and a store has one at a "
                          "time: submit the batch to that coordinator (forktrial submit " +
                          *file + " --coordinator ENDPOINT), or give the batch another --store");
    }
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
    // SIGINT (Ctrl-C) and SIGTERM cancel the job and stop the daemons; a
    // second one, with the default disposition back, ends the batch at once
    // (its daemons get SIGTERM as their parent dies). end_by() ends the
    // process the way the signal would have, once the daemons are stopped
    // and the scratch directory removed.
    sandbox::Cancellation stop;
    std::optional<StopSignals> signals(std::in_place, stop);
    const int stopped_by = [&] {
      // A private directory (mkdtemp: mode 0700, a name nobody can guess or
      // take first): the endpoint in it has no keys, so only this user may
      // reach it. Removed last, once every daemon using it has stopped.
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
      const auto stop_daemons = [&] {
        for (auto& worker : pool) worker->terminate();
        for (auto& worker : pool) worker->stop();
        coordinator.stop();
      };
      coordinator::Client client(endpoint, std::chrono::seconds(30));
      // A coordinator that stops (it found the store in use, or cannot write
      // it) ends the wait at once: its log above says why.
      client.set_interrupted([&] { return stop.cancelled() || !coordinator.running(); });
      // Its own coordinator, just started, binds the endpoint once it has
      // opened the store: refusals until then are waited out, and its death
      // ends the wait.
      client.set_refused_grace(std::nullopt);
      const auto coordinator_died = [&] {
        return CommandFailed("the batch's coordinator stopped (" + coordinator.how_it_ended() +
                             ") before the batch finished; its log is above");
      };
      std::optional<coordinator::SubmittedJob> job;
      try {
        if (!stop.cancelled()) job = submit_batch(client, batch, *no_cache);
      } catch (const Error&) {
        if (!stop.cancelled() && !coordinator.running()) throw coordinator_died();
        if (!stop.cancelled()) throw;
      }
      if (job && !*json) {
        std::fprintf(stderr, "batch %s: job %s, %llu trials on %u workers\n", batch.name.c_str(),
                     job->job.c_str(), static_cast<unsigned long long>(job->total), *workers);
      }
      ordered_json status;
      const bool tty = !*json && ::isatty(STDERR_FILENO);
      // The coordinator holds each status until the job finishes, or for a
      // quarter of a second, after which the daemons are looked at again.
      constexpr std::chrono::milliseconds kHold{250};
      while (job && !stop.cancelled()) {
        const auto asked = std::chrono::steady_clock::now();
        try {
          status = client.status(job->job, kHold);
        } catch (const Error& e) {
          // A stop signal ends the wait (and cancels the job below); a
          // coordinator that died is said so below, not as a silence.
          if (!stop.cancelled() && coordinator.running()) throw;
        }
        if (stop.cancelled()) break;
        if (!status.is_null()) {
          if (tty) std::fprintf(stderr, "\r%s", progress_line(status).c_str());
          if (status["finished"].get<bool>()) break;
        }
        if (!coordinator.running()) throw coordinator_died();
        if (std::none_of(pool.begin(), pool.end(), [](auto& w) { return w->running(); })) {
          std::string how;
          for (auto& worker : pool) how += (how.empty() ? "" : ", ") + worker->how_it_ended();
          throw CommandFailed("every worker of the batch died (" + how +
                              ") with trials left; their log is above");
        }
        std::this_thread::sleep_until(asked + std::chrono::milliseconds(20));
      }
      if (tty) std::fprintf(stderr, "\n");
      if (stop.cancelled()) {
        const int signal = stop_signal_received();
        signals.reset();
        std::fprintf(stderr, "batch: stopping on SIG%s: %s; send it again to stop at once\n",
                     sigabbrev_np(signal),
                     job ? ("cancelling job " + job->job + " and stopping its workers").c_str()
                         : "stopping the workers");
        if (job) {
          // The coordinator is in a process group of its own: a terminal's
          // Ctrl-C did not reach it, and it records the cancellation.
          client.set_interrupted([&] { return !coordinator.running(); });
          try {
            status = client.cancel(job->job);
            std::fprintf(stderr, "batch: job %s cancelled: %s\n", job->job.c_str(),
                         progress_line(status).c_str());
          } catch (const Error& e) {
            std::fprintf(stderr, "batch: job %s could not be cancelled: %s\n", job->job.c_str(),
                         e.what());
          }
        }
        stop_daemons();
        return signal;
      }
      const auto results = all_results(client, job->job);
      print_results(results, *json ? "json" : "text", *by);
      if (*json) {
        std::printf("%s\n", summary_of(status).dump().c_str());
      } else {
        std::printf("\n");
        print_summary(status, false);
      }
      stop_daemons();
      if (const int code = wait_status(status); code != 0) throw ExitStatus(code);
      return 0;
    }();
    if (stopped_by != 0) {
      std::fprintf(stderr,
                   "batch: stopped; its workers, their trials and its scratch directory "
                   "are gone\n");
      end_by(stopped_by);
    }
  });
}

}  // namespace

void add_cluster_commands(CLI::App& app) {
  add_keygen(app);
  add_coordinator(app);
  add_worker(app);
  add_client_commands(app);
  add_batch(app);
}

}  // namespace forktrial::tools
