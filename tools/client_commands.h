// The commands that speak to a coordinator as its clients (submit, status,
// wait, cancel, results, workers, import) and keygen, which makes their keys;
// with what `batch`, a client of its own coordinator, shares of them.
//
// They need none of the store, the trial children or the daemons' libraries,
// so the lean `forktrial` front end (front_end_main.cc) runs them itself, in
// a process whose start costs under twice a bare one's; every other command
// is forktrial-full's, which has these too
// (docs/decisions/0085-a-lean-front-end-for-the-client-commands.md).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/batch_file.h"
#include "coordinator/client.h"
#include "transport/curve.h"

namespace forktrial::tools {

// Where clients look for the coordinator, and the coordinator listens, by default.
inline constexpr const char* kDefaultEndpoint = "tcp://127.0.0.1:7600";

// What to do about a --key that cannot be read: the library says what is wrong.
inline constexpr const char* kKeygenAdvice = "\n`forktrial keygen FILE` writes a keypair file";

// $FORKTRIAL_COORDINATOR, or kDefaultEndpoint when it is unset or empty.
std::string default_endpoint();

// A worker's or client's CURVE credentials: both flags or neither.
struct KeyOptions {
  std::string key;
  std::string coordinator_key;

  void add_to(CLI::App* cmd);
  // The keys, none when neither flag was given. Throws CommandFailed (a
  // usage error) when one flag is missing or a file cannot be read.
  std::optional<transport::ClientKeys> load() const;
};

// How long a waiting command lets the coordinator hold its status request:
// it answers at once when the job finishes, else after this, when the
// progress line and the waiting reasons are told again.
inline constexpr std::chrono::milliseconds kStatusHold{1000};

// A job's progress as one line: a bar, counts, outcomes, pace and state.
std::string progress_line(const nlohmann::ordered_json& status);
// The counts of a job's status, flat, as `wait --json` prints them.
nlohmann::ordered_json summary_of(const nlohmann::ordered_json& status);
void print_summary(const nlohmann::ordered_json& status, bool json);
// wait's exit status: 0 when every trial was reconciled, else 1.
int wait_status(const nlohmann::ordered_json& status);

// The batch file, or CommandFailed (a usage error) listing every problem.
coordinator::Batch read_batch_or_fail(const std::string& file);
// Uploads what the coordinator lacks and submits the batch, whose trials and
// candidates it empties on the way. Throws Error from the client.
// `no_cache`: every trial runs (`--no-cache`), none answered from the
// coordinator's result cache.
coordinator::SubmittedJob submit_batch(coordinator::Client& client, coordinator::Batch& batch,
                                       bool no_cache = false);
// Every result of the job, page by page.
std::vector<nlohmann::ordered_json> all_results(coordinator::Client& client,
                                                const std::string& job);
// Prints results as "text", "json" or "csv", or ranked by candidate (`by`).
void print_results(const std::vector<nlohmann::ordered_json>& results, const std::string& format,
                   const std::string& by);

void add_keygen(CLI::App& app);
// submit, status, wait, cancel, results, workers and import, in that order.
void add_client_commands(CLI::App& app);
// Registers the command `name` if it is keygen or one of
// add_client_commands', and says whether it was: the front end registers the
// one command it runs, not the others it would only build and drop.
bool add_client_command(CLI::App& app, std::string_view name);

}  // namespace forktrial::tools
