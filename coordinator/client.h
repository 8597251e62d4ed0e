// The command line's side of the wire: one DEALER connection to a
// coordinator, one request at a time, each answered or timed out. Used by
// `forktrial submit | status | wait | cancel | results | workers | batch`.
//
// Not thread-safe: one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/error.h"
#include "base/world.h"
#include "coordinator/orchestration.h"
#include "transport/curve.h"

namespace forktrial::coordinator {

// A bundle a job names: its pin and the blob holding its archive.
struct BundleBlob {
  Digest pin;
  Digest archive;
};

struct SubmittedJob {
  std::string job;
  std::uint64_t total = 0;
};

struct ResultsPage {
  std::vector<std::string> lines;  // one JSON object per trial
  std::uint32_t next = 0;
  std::uint32_t total = 0;
};

// How often a wait asks the caller's `interrupted` (Client::set_interrupted).
inline constexpr std::chrono::milliseconds kInterruptCheck{200};
// How long a client that has never connected goes on trying an endpoint
// that refuses every connection before a call ends (Error, unavailable:
// "nothing listens at ..."), its deadline notwithstanding: a coordinator
// starting binds its endpoint well within it.
inline constexpr std::chrono::milliseconds kRefusedGrace{2000};

class Client {
 public:
  // Connects to `endpoint` (with CURVE when `keys` are given) and says
  // hello. Throws Error (unavailable) when the coordinator does not answer
  // within `timeout`, Error (internal) for an endpoint ZeroMQ refuses.
  // Its waits and resends follow `world`'s monotonic clock, its submission
  // tokens its randomness (base/world.h).
  Client(const std::string& endpoint, std::chrono::milliseconds timeout,
         const std::optional<transport::ClientKeys>& keys = std::nullopt,
         World& world = real_world());
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A signal interrupting a wait ends the call with Error (cancelled) when
  // `interrupted` says so; other signals are waited through. `interrupted`
  // is also asked every kInterruptCheck of a wait, for what ends without a
  // signal (a coordinator process the caller started).
  void set_interrupted(std::function<bool()> interrupted);
  // How long refused connections are tried before a call ends
  // (kRefusedGrace); none: until the call's deadline. A client that once
  // connected waits out refusals (a coordinator restarting) until then.
  void set_refused_grace(std::optional<std::chrono::milliseconds> grace);

  // Each call throws Error: unavailable when no answer came in time,
  // failed_precondition or not_found (with the coordinator's message) when it
  // refused.
  std::vector<Digest> find_missing(const std::vector<Digest>& digests);
  void put_blob(const Digest& digest, const std::string& bytes);
  // A job whose specifications take more than `max_part_bytes` goes in
  // parts, each within it, under one token (docs/wire-protocol.md).
  static constexpr std::size_t kMaxPartBytes = std::size_t{64} << 20;
  // `retention`: the job's own (docs/cluster.md, "Retention"); none: gc's.
  // `no_cache`: every trial runs, none answered from the result cache.
  SubmittedJob submit(const std::string& name, int priority, const std::vector<std::string>& trials,
                      const std::vector<BundleBlob>& bundles,
                      std::size_t max_part_bytes = kMaxPartBytes,
                      std::optional<RetentionPolicy> retention = {}, bool no_cache = false);
  // "" for every job. With a `hold` (at most kMaxStatusHold), the
  // coordinator answers when the job finishes or after `hold`, whichever
  // comes first; a coordinator that does not hold answers at once.
  static constexpr std::chrono::milliseconds kMaxStatusHold{10000};
  nlohmann::ordered_json status(const std::string& job, std::chrono::milliseconds hold = {});
  nlohmann::ordered_json cancel(const std::string& job);
  ResultsPage results(const std::string& job, std::uint32_t after, std::uint32_t limit);
  nlohmann::ordered_json workers();
  // Imports the activegraph JSON Lines `bytes` as run `run_id` (a fork of
  // `fork_of` at `at` when given) into the coordinator's store, uploading
  // them first; the run ({"id", "label", "events", "parent"}).
  nlohmann::ordered_json import_run(const std::string& bytes, const std::string& run_id,
                                    const std::string& label, const std::string& fork_of = "",
                                    const std::string& at = "");

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace forktrial::coordinator
