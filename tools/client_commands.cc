// `forktrial keygen | submit | status | wait | cancel | results | workers |
// import`: the coordinator's clients, and the keys they connect with.
#include "tools/client_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/digest.h"
#include "base/timestamp.h"
#include "base/world.h"
#include "coordinator/candidate_ranking.h"
#include "pack/bundle_archive.h"
#include "sandbox/limit_units.h"
#include "sandbox/trial_types.h"
#include "schema/wire_codec.h"
#include "tools/cli_support.h"
#include "tools/results_sqlite.h"
#include "tools/terminal.h"

namespace forktrial::tools {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr const char* kCoordinatorEnv = "FORKTRIAL_COORDINATOR";

void add_endpoint(CLI::App* cmd, std::string& endpoint) {
  endpoint = default_endpoint();
  cmd->add_option("--coordinator", endpoint,
                  "The coordinator's endpoint (env FORKTRIAL_COORDINATOR)")
      ->capture_default_str();
}

}  // namespace

std::string default_endpoint() {
  const char* env = std::getenv(kCoordinatorEnv);
  return env != nullptr && *env != '\0' ? env : kDefaultEndpoint;
}

void KeyOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--key", key,
                  "This peer's CurveZMQ keypair file (forktrial keygen); with "
                  "--coordinator-key, the connection is authenticated and encrypted")
      ->envname("FORKTRIAL_KEY");
  cmd->add_option("--coordinator-key", coordinator_key,
                  "The coordinator's public key: 40 Z85 characters, or its .pub file")
      ->envname("FORKTRIAL_COORDINATOR_KEY");
}

std::optional<transport::ClientKeys> KeyOptions::load() const {
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

namespace {

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

}  // namespace

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
  // Of the results, those answered from the result cache, not run.
  if (const auto cached = status.value("cached", std::uint64_t{0}); cached > 0) {
    line += "  cached " + std::to_string(cached);
  }
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

namespace {

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

// Asks the job's status, held at the coordinator until the job finishes
// (kStatusHold at most each time), until it is finished or until `max_wait`
// seconds have passed (0: no limit); the last status, and whether it is
// finished.
std::pair<ordered_json, bool> wait_for(coordinator::Client& client, const std::string& job,
                                       bool progress, double max_wait) {
  const bool tty = progress && ::isatty(STDERR_FILENO);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(max_wait));
  std::string said_waiting;
  for (;;) {
    const auto asked = std::chrono::steady_clock::now();
    auto hold = kStatusHold;
    if (max_wait > 0) {
      hold = std::min(hold, std::chrono::ceil<std::chrono::milliseconds>(until - asked));
    }
    ordered_json status = client.status(job, hold);
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
    // A coordinator that does not hold statuses (an older one, or one
    // holding as many as it will) answers at once: ask it ten times a
    // second at most.
    std::this_thread::sleep_until(asked + std::chrono::milliseconds(100));
  }
}

}  // namespace

ordered_json summary_of(const ordered_json& status) {
  ordered_json out{{"job", status["job"]}, {"total", status["total"]}};
  for (const auto& [name, count] : status["status"].items()) out[name] = count;
  for (const auto& [name, count] : status["outcomes"].items()) out[name] = count;
  out["cancelled"] = status["cancelled"];
  // Of the reconciled, those answered from the result cache (a coordinator
  // before the cache says nothing: none).
  out["cached"] = status.value("cached", std::uint64_t{0});
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
  if (const auto cached = status.value("cached", std::uint64_t{0}); cached > 0) {
    std::printf("  %-22s %llu (answered from the result cache, not run)\n", "of them cached",
                static_cast<unsigned long long>(cached));
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

namespace {

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

}  // namespace

// Uploads what the coordinator lacks and submits the batch, whose trials and
// candidates it empties on the way: each specification is let go as soon as
// its text is made, so that a million of them are not held twice.
coordinator::SubmittedJob submit_batch(coordinator::Client& client, coordinator::Batch& batch,
                                       bool no_cache) {
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
                         coordinator::Client::kMaxPartBytes, batch.retention, no_cache);
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

namespace {

constexpr const char* kResultFields[] = {
    "trial",       "candidate",    "pin",         "scenario",        "at",
    "status",      "outcome",      "fork_run_id", "events_appended", "behavior_failures",
    "exit_code",   "detail",       "worker",      "attempts",        "duration_ms",
    "cached_from", "cached_worker"};

std::string csv_cell(const ordered_json& value) {
  std::string text = value.is_string() ? value.get<std::string>()
                     : value.is_null() ? ""
                                       : value.dump();
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

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
    // A trial answered from the result cache names the trial that ran.
    const bool cached = r.contains("cached_from") && r["cached_from"].is_string();
    std::printf("%-26s %-16s %-22s %-9s %-22s %6s %8s%s\n", text(r["trial"]).c_str(),
                text(r["candidate"]).c_str(), text(r["scenario"]).c_str(), text(r["at"]).c_str(),
                (r["outcome"].is_string() ? text(r["outcome"]) : text(r["status"])).c_str(),
                text(r["events_appended"]).c_str(), text(r["behavior_failures"]).c_str(),
                cached ? ("  cached from " + text(r["cached_from"])).c_str() : "");
  }
}

namespace {

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
  auto no_cache = std::make_shared<bool>(false);
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
  cmd->add_flag("--no-cache", *no_cache,
                "Run every trial: answer none from the result cache of trials already run "
                "(deterministic candidates), and keep none's result in it");
  o->add_to(cmd);
  cmd->footer(examples_footer({
      "forktrial submit nightly.toml --coordinator tcp://coord:7600 --wait",
      "forktrial submit nightly.toml --json            # {\"job\": ID, \"total\": N}",
  }));
  cmd->callback([=] {
    auto batch = read_batch_or_fail(*file);
    auto client = o->connect();
    const auto job = submit_batch(client, batch, *no_cache);
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

namespace {

// The commands add_client_commands registers, in its order.
struct ClientCommand {
  std::string_view name;
  void (*add)(CLI::App&);
};
constexpr ClientCommand kClientCommands[] = {
    {"submit", add_submit},
    {"status", add_status},
    {"wait", add_wait},
    {"cancel", add_cancel},
    {"results", add_results},
    {"workers", add_workers},
    {"import", add_import_to_coordinator},
};

}  // namespace

void add_client_commands(CLI::App& app) {
  for (const ClientCommand& command : kClientCommands) command.add(app);
}

bool add_client_command(CLI::App& app, std::string_view name) {
  if (name == "keygen") {
    add_keygen(app);
    return true;
  }
  for (const ClientCommand& command : kClientCommands) {
    if (command.name == name) {
      command.add(app);
      return true;
    }
  }
  return false;
}

}  // namespace forktrial::tools
