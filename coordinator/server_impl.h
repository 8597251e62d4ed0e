// The coordinator's loop, split by concern (docs/decisions/0079): the class
// every part defines, and the helpers they share. Private to the component.
#pragma once

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <zmq.hpp>

#include "base/memory.h"
#include "base/text.h"
#include "base/timestamp.h"
#include "coordinator/activity.h"
#include "coordinator/candidate_ranking.h"
#include "coordinator/metrics.h"
#include "coordinator/orchestration_log.h"
#include "coordinator/result_cache.h"
#include "coordinator/server.h"
#include "coordinator/status_page.h"
#include "coordinator/store_disk.h"
#include "coordinator/upload_spool.h"
#include "pack/bundle_archive.h"
#include "sandbox/delta.h"
#include "sandbox/trial_types.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "store/writer_lock.h"
#include "transport/metrics_endpoint.h"
#include "transport/zap.h"

namespace forktrial::coordinator::detail {

using nlohmann::ordered_json;
using schema::wire::Envelope;

// A reconciled trial's result in the log: what the store and the worker
// established (the verdict of its trial.settled event), completed from the
// job when read. Logs written before hold it as a trial.verdict event, or
// older ones the whole result line (trial.result).
constexpr std::string_view kVerdictType = "trial.verdict";
constexpr std::string_view kResultType = "trial.result";

constexpr std::size_t kMaxMessagesPerTurn = 256;
// The most trials of a finished job archived in one turn's transaction.
constexpr std::uint64_t kArchiveTrialsPerTurn = 2048;
constexpr std::size_t kMaxWorkerIdBytes = 256;
// How long a worker's offer of slots waits for work before it is answered
// empty (the worker offers again at once).
constexpr auto kParkLimit = std::chrono::seconds(1);
// A client's status request held until its job finishes: at most this long,
// and at most this many held at once (past it, answered at once).
constexpr auto kMaxStatusHold = std::chrono::seconds(10);
constexpr std::size_t kMaxHeldStatuses = 1024;
// The most of a peer's text the coordinator keeps (docs/wire-protocol.md,
// "Text from a peer"); a verdict's bounds are sandbox/delta.h's.
constexpr std::size_t kMaxIsolationBytes = std::size_t{16} << 10;
constexpr std::size_t kMaxReasonBytes = std::size_t{4} << 10;
// Of a worker's hello: the executors read, and the bytes of a version kept.
constexpr unsigned kMaxExecutorOffers = 16;
constexpr std::size_t kMaxVersionBytes = 128;
constexpr std::size_t kMaxJobNameBytes = 256;
// The longest a job may keep its forks before gc may collect them: 100 years.
constexpr std::uint64_t kMaxKeepForksAfter = std::uint64_t{100} * 365 * 86400 * 1000;
// A full store is tried again once its disk has this much room, first after
// a second, then less and less often while the tries fail.
constexpr std::uint64_t kResumeFreeBytes = std::uint64_t{4} << 20;
constexpr auto kLongestProbe = std::chrono::seconds(60);
constexpr auto kStillFullLog = std::chrono::seconds(30);

// The messages that need a write to the store to be answered: a worker's
// (fetching a blob aside) and a client's submission, cancellation or upload.
inline bool writes(Envelope::Which which) {
  if (wire::is_worker_message(which)) return which != Envelope::FETCH_BLOB;
  return which == Envelope::SUBMIT_JOB || which == Envelope::CANCEL_JOB ||
         which == Envelope::PUT_BLOB || which == Envelope::IMPORT_RUN;
}

// The coordinator's store flushes each commit's meta page with the next
// commit: one disk flush per commit instead of two. A process crash still
// loses nothing committed, so nothing acknowledged; a power loss may undo the
// last commit, whose acknowledged reports then come back as lapsed leases and
// are run again (docs/decisions/0061-coordinator-cost-per-trial.md). A turn
// that accepted a submission or a cancel flushes the meta page too before it
// answers (flush()): a client told "accepted" finds its job after any crash,
// power loss included.
inline store::StoreOptions coordinator_store_options(World& world, const ServerConfig& config) {
  store::StoreOptions options;
  options.sync = config.durable;
  options.sync_meta = false;
  // The trials' forks are most of the store, and their events alike.
  options.deflate_events = true;
  // A world whose disk is full refuses the commit, as a real full disk does.
  options.before_commit = [&world, store = config.store] {
    if (auto why = world.write_refused(store)) throw store::StoreFull(*why);
  };
  // Runs are stamped with the world's time.
  options.clock = [&world] {
    return format_timestamp(
        std::chrono::duration_cast<std::chrono::milliseconds>(world.wall_now().time_since_epoch())
            .count());
  };
  return options;
}

// Whether `id` is one the coordinator names runs with itself: its trials'
// forks (fork_run_of: jobs are job_...) and its own runs (forktrial.*). A
// client may not take one, or it could stop a trial from ever being
// recorded.
inline bool coordinator_run_id(std::string_view id) {
  return id.starts_with(store::kJobForkPrefix) || id.starts_with(store::kInternalRunPrefix);
}

// The most text one submitted trial ({"candidate", "spec"}) may have:
// far above any a batch file makes (its label at most 1024 bytes, its ids
// 250, a few packs), far below what would let one cost much to parse.
inline constexpr std::size_t kMaxTrialBytes = std::size_t{64} << 10;

// A trial's specification, parsed, with its canonical JSON.
struct ParsedSpec {
  sandbox::TrialSpecification spec;
  std::string canonical;
};

// Specifications are parsed once per distinct text: a matrix repeats one
// specification for every repeat, and a trial's is read again when it is
// leased. Bounded: emptied when full.
class SpecCache {
 public:
  std::expected<std::shared_ptr<const ParsedSpec>, Status> parse(const std::string& text) {
    auto it = parsed_.find(text);
    if (it != parsed_.end()) return it->second;
    auto spec = sandbox::parse_trial_specification(text);
    if (!spec) return failure(ErrorCode::invalid_argument, spec.error().list.front());
    // Held to the rules a local trial is held to before its child starts
    // (a label the fork's run could not take, limits out of range): a
    // client's command line checks them, a hand-built submission is not.
    if (auto problems = sandbox::check_trial_specification(*spec); !problems.empty()) {
      return failure(ErrorCode::invalid_argument, std::move(problems.front()));
    }
    std::string canonical = sandbox::to_canonical_json(*spec);
    auto parsed =
        std::make_shared<const ParsedSpec>(ParsedSpec{std::move(*spec), std::move(canonical)});
    if (parsed_.size() >= kLimit) parsed_.clear();
    parsed_.emplace(text, parsed);
    return parsed;
  }

 private:
  static constexpr std::size_t kLimit = 4096;
  std::unordered_map<std::string, std::shared_ptr<const ParsedSpec>> parsed_;
};

// A trial as submitted: the specification (pack roots are bundles) and the
// candidate's name, for results.
struct SubmittedTrial {
  std::shared_ptr<const ParsedSpec> parsed;
  std::string candidate;

  const sandbox::TrialSpecification& spec() const { return parsed->spec; }
  const std::string& spec_json() const { return parsed->canonical; }
};

inline std::expected<SubmittedTrial, Status> parse_submitted(const std::string& text,
                                                             SpecCache& specs) {
  auto doc = ordered_json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("spec") || !doc["spec"].is_object()) {
    return failure(ErrorCode::invalid_argument, "a submitted trial is {\"candidate\", \"spec\"}");
  }
  auto parsed = specs.parse(doc["spec"].dump());
  if (!parsed) return std::unexpected(parsed.error());
  const auto candidate = doc.find("candidate");
  if (candidate != doc.end() && !candidate->is_string()) {
    return failure(ErrorCode::invalid_argument,
                   "a submitted trial's \"candidate\" is a name (a string)");
  }
  return SubmittedTrial{std::move(*parsed),
                        candidate == doc.end() ? "" : candidate->get<std::string>()};
}

// The payload this coordinator records for a trial:
// {"candidate":<name>,"spec":<canonical specification>}, the bytes an
// ordered_json of the two would dump.
inline std::string payload_of(const std::string& candidate, const std::string& spec_json) {
  return "{\"candidate\":" + ordered_json(candidate).dump() + ",\"spec\":" + spec_json + "}";
}

// The candidate's name, and where the specification's text starts, in a
// payload as payload_of writes it (and a client sends it):
// {"candidate":<string>,"spec":<object>}. nullopt for any other shape.
inline std::optional<std::pair<std::string, std::size_t>> split_payload(const std::string& text) {
  constexpr std::string_view head = "{\"candidate\":\"";
  constexpr std::string_view middle = ",\"spec\":";
  if (!text.starts_with(head) || !text.ends_with('}')) return std::nullopt;
  std::size_t end = head.size();
  bool escaped = false;
  for (; end < text.size(); ++end) {
    if (text[end] == '\\') {
      escaped = true;
      ++end;
    } else if (text[end] == '"') {
      break;
    }
  }
  if (end >= text.size() || text.compare(end + 1, middle.size(), middle) != 0) return std::nullopt;
  const std::size_t spec_at = end + 1 + middle.size();
  if (!escaped) return std::make_pair(text.substr(head.size(), end - head.size()), spec_at);
  auto name =
      ordered_json::parse(text.substr(head.size() - 1, end - head.size() + 2), nullptr, false);
  if (!name.is_string()) return std::nullopt;
  return std::make_pair(name.get<std::string>(), spec_at);
}

// A submitted trial read without parsing its JSON twice: the specification's
// text is cut out (split_payload); anything else is read by parse_submitted.
inline std::expected<SubmittedTrial, Status> read_payload(const std::string& text,
                                                          SpecCache& specs) {
  auto split = split_payload(text);
  if (!split) return parse_submitted(text, specs);
  auto& [candidate, spec_at] = *split;
  auto parsed = specs.parse(text.substr(spec_at, text.size() - 1 - spec_at));
  if (!parsed) return parse_submitted(text, specs);
  return SubmittedTrial{std::move(*parsed), std::move(candidate)};
}

// The candidate's name in a payload, without reading its specification.
inline std::string payload_candidate(const std::string& text) {
  if (auto split = split_payload(text)) return std::move(split->first);
  const auto doc = ordered_json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("candidate") || !doc["candidate"].is_string()) return "";
  return doc["candidate"].get<std::string>();
}

struct Peer {
  enum class Role { worker, client } role = Role::client;
  WorkerId worker;
};

// What a worker's hello said of its host.
struct WorkerInfo {
  std::vector<std::string> warnings;  // degraded nets, from its preflight
  ordered_json isolation;             // its guarantees
  // The executors it offers, with the version of each; its reports must
  // name the one its trial needs, at that version.
  std::map<pack::Executor, std::string> executors;
};

class Server {
 public:
  // Without `listen`, no endpoint: frames come in through take() and the
  // replies stay in the outbox for the caller (CoordinatorCore).
  Server(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log,
         bool listen = true);

  // The status API's requests waiting for this thread are answered 503.
  ~Server() { api_.close(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The wall clock, to the millisecond the records keep.
  Instant clock_now() { return std::chrono::time_point_cast<Duration>(world_.wall_now()); }

  int run();

 private:
  // ---- persistence: every record is in the store before a peer hears of it.

  bool uncommitted() const { return !pending_.empty() || !reconciling_.empty(); }

  // What follows a turn's frames, in the daemon and in the core alike: the
  // probes learn the loop turned; time passes for the scheduler and the
  // parked offers (or, with the store full, the disk is looked at);
  // everything decided is committed and answered; a large submission's
  // memory goes back to the system.
  void end_turn();

  // Group commit: with something to commit, the messages that arrive within
  // the commit window are taken into the same transaction. The window is
  // slept through and what came is read at its end: one wake-up per turn
  // rather than one per message.
  void gather();

  void keep(Records records);

  // Time passes for the scheduler: leases lapse, silent workers are lost;
  // and for the uploads: abandoned ones are dropped.
  void keep_tick(Instant now);

  // What pending_ held is in the store now.
  void pending_committed();

  void flush();
  // Writes what the turn holds so far (commit_turn) now, not at its end;
  // made durable with the rest of the turn. A full store is handled as
  // flush handles it.
  void commit_now();

  void commit_turn();

  // ---- a full store: stop, lose nothing, resume when there is room.

  std::string busy_message() const;

  void reply_busy(const std::string& route, std::uint64_t request);

  // A commit failed for want of room. What it held was decided in memory
  // only and never told to anyone: it is undone by rebuilding the scheduler
  // from the log, and every reply of the turn becomes "busy" (the peer sends
  // again). Until a commit succeeds the coordinator leases nothing, reconciles
  // nothing and takes no job; leases do not lapse meanwhile, and on resuming
  // they are all renewed, as after a restart.
  void store_full(const std::string& why);

  // While full: once the disk has room, a commit is tried (every live
  // worker's leases renewed, as after a restart); when it fails again the
  // next try waits twice as long.
  void probe_store();

 public:
  // One turn of the loop without the socket: `frame` from `route`, then time
  // passing to `now`, then the commit. Returns the turn's replies.
  // CoordinatorCore's turn: one frame, taken as run() takes what its socket
  // gives, then the same end of turn. The time is the world's.
  std::vector<std::pair<std::string, std::string>> turn(
      std::span<const CoordinatorCore::Frame> frames);

  const Scheduler& scheduler() const { return scheduler_; }
  std::optional<TrialStatus> archived_status(const TrialId& trial) const {
    auto archived = read_archived_trial(store_.snapshot(), trial);
    if (!archived || !*archived) return std::nullopt;
    return (*archived)->status;
  }

 private:
  // A reply that cannot be delivered (the peer is gone: ROUTER_MANDATORY;
  // or it does not read: the send timeout) is counted and logged, never
  // dropped unseen. Nothing is lost with it: the decision is in the store,
  // a client asks again, a worker sends its report again after its next
  // hello, and an assignment it never heard of lapses with its lease.
  void send_to(const std::string& route, const std::string& frame);

  void reply(const std::string& route, std::string frame);

  void reply_error(const std::string& route, std::uint64_t request, const Status& status);
  void reply_error(const std::string& route, std::uint64_t request, ErrorCode code,
                   const std::string& message);

  // ---- start-up

  void recover();

  // Applies the whole log to scheduler_, a new one, and to activity_;
  // returns how many records.
  std::uint64_t replay_log();

  // ---- compaction of the log (coordinator/orchestration_log.h)

  // The head at which a log whose last snapshot is `snapshot` is compacted.
  std::uint64_t compaction_due(const LogSnapshot& snapshot) const;
  // At the end of a turn, its replies sent: compacts the log when its head
  // has reached compact_at_.
  void maybe_compact_log();
  // Replaces the log by a snapshot of the scheduler and the results of its
  // unarchived jobs, in one transaction, and points result_seqs_ at the
  // new log. False, with the log as it was, when the store refuses it.
  bool compact_log_now(Instant now);

 public:
  // After the start: compacts the log now, throwing when it cannot, and
  // returns the records set aside (repair_log).
  std::vector<SetAside> repair();

 private:
  // A job's trials have no result yet.
  void note_job(const JobSubmitted& job);

  // Where a trial's result is in the log: its results are read from the
  // store when asked for, not held (a million results would be a gigabyte).
  void remember_result(const store::EventView& event);

  void remember_result(const TrialId& trial, std::uint64_t seq);

  // What the log holds of `trial`'s result, read in `snapshot`: a verdict
  // (a trial.settled's, or a trial.verdict payload) or, `line`, the whole
  // line of a trial.result, as written.
  struct StoredResult {
    std::string text;  // a JSON object
    bool line = false;
  };
  std::optional<StoredResult> stored_result_text(const TrialId& trial,
                                                 const store::Snapshot& snapshot);
  // The result line of `trial`, if the log holds its result.
  std::optional<std::string> stored_result(const TrialId& trial, const store::Snapshot& snapshot);
  // The result line a verdict stands for, completed from the trial's
  // `payload` as submitted and its state (the attempt reconciled, the worker
  // that reported it, the outcome: the scheduler's or the archive's, never
  // the verdict's); none when it does not parse.
  std::optional<std::string> result_from_verdict(const TrialId& trial, const ordered_json& doc,
                                                 const std::string& payload, Attempt attempt,
                                                 const WorkerId& worker, Outcome outcome);
  // The line of a trial that has no result: queued, running, or ended
  // without one (cancelled, abandoned), with its reasons as the detail.
  std::string line_without_result(const TrialId& trial, TrialStatus status, Attempt attempt,
                                  const WorkerId& worker, const std::vector<std::string>& reasons,
                                  const std::string& payload);
  // The line of a trial of an archived job, from its archive.
  std::string archived_line(const TrialId& trial, const store::Snapshot& snapshot);

  // ---- archiving finished jobs

  // Writes the next piece (kArchiveTrialsPerTurn trials) of the first
  // finished job's archive, and with its last piece the job.archived record,
  // then the scheduler forgets its trials.
  void archive_finished();
  // Jobs whose archive the store refused: kept whole in memory, and not
  // tried again by this process.
  std::set<JobId> unarchivable_;
  // The job being archived: the trial its next piece starts at, and the
  // first trial of each payload so far (the scheduler shares a payload
  // between a job's trials that have the same), so that a repeat's archived
  // event names the trial holding its input rather than copying it.
  struct Archiving {
    JobId job;
    std::uint64_t next = 0;
    std::unordered_map<const std::string*, std::uint32_t> first;
  };
  std::optional<Archiving> archiving_;

  // ---- receiving

  bool receive_one(Instant now);

  // One frame from `route`, whose connection's key has `role` (with CURVE):
  // decoded, checked against the role, handled; every refusal answered.
  void take(const std::string& route, std::string_view frame, std::optional<transport::Role> role,
            Instant now);

  void handle(const std::string& route, Envelope::Reader envelope, Instant now);

  void reply_ok(const std::string& route, std::uint64_t request);

  // ---- workers

  void on_worker_hello(const std::string& route, Envelope::Reader envelope, Instant now);

  void on_request_work(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                       Instant now);

  // Offers waiting for work are answered when there is some, and answered
  // empty after kParkLimit, well inside the worker's patience.
  void serve_parked(Instant now);

  void assign(const std::string& route, const WorkerId& worker, std::uint32_t free,
              std::uint64_t request, Instant now);

  void on_heartbeat(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                    Instant now);

  void send_stop(const std::string& route, const std::vector<AttemptRef>& trials);

  using WireVerdict = schema::wire::ReportVerdict;

  static WireVerdict wire_verdict(ReportVerdict verdict);

  void ack(const std::string& route, std::uint64_t request, schema::wire::TrialRef::Reader ref,
           WireVerdict verdict, std::string_view reason = {});

  void ack(const std::string& route, std::uint64_t request, const TrialId& trial, Attempt attempt,
           WireVerdict verdict, std::string_view reason = {});

  // A trial as submitted, parsed once per lease rather than per message.
  const SubmittedTrial& submitted_trial(const TrialId& trial);

  void on_attempt_failed(const std::string& route, const WorkerId& worker,
                         Envelope::Reader envelope, Instant now);

  // The worker stops: it is lost now (its leases requeued or abandoned, as
  // when its heartbeats stop, without waiting for them to lapse), and its
  // route forgotten. It names no worker: a connection can only end its own.
  // Forgets the worker's connection: its route, and an offer it left
  // parked (a new hello replaces it; a quarantine ends it).
  void forget_connection(const WorkerId& worker);
  void on_worker_goodbye(const std::string& route, const WorkerId& worker,
                         Envelope::Reader envelope, Instant now);

  void on_report(const std::string& route, const WorkerId& worker, Envelope::Reader envelope,
                 Instant now);

  // What a report says, copied out of its message.
  struct Reconciliation {
    std::string route;
    std::uint64_t request = 0;
    WorkerId worker;
    TrialId trial;
    Attempt attempt = 0;
    Instant at;
    sandbox::TrialVerdict verdict;
    std::vector<store::NewEvent> events;
    std::uint64_t duration_ms = 0;
    std::chrono::steady_clock::time_point received;  // for the reconciliation's latency
    sandbox::Isolation isolation = sandbox::Isolation::standard;
    pack::Executor executor = pack::Executor::lua;  // what ran the candidate
    std::string executor_version;
  };

  // The fork point's timestamp of a submitted trial, from the store.
  UnixMillis fork_point_time(const sandbox::TrialSpecification& spec);

  // What is known of a fork point (a stored run's event), once read: its
  // time, and the behavior failures of the run up to it. The events up to a
  // fork point never change, and a run deleted and made again has a new
  // number, so what is kept holds while the process lives; kept for at most
  // kMaxForkPoints points (then forgotten at once), so that each trial
  // reads its own delta and not its parent's whole history.
  struct ForkPointFacts {
    std::optional<UnixMillis> time;
    std::optional<std::uint64_t> seq;  // the fork point's, in its run's lineage
    std::optional<std::uint64_t> failures_before;
  };
  static constexpr std::size_t kMaxForkPoints = 4096;
  ForkPointFacts& fork_point(std::uint64_t run_number, const store::EventId& at);

  // What a report says, copied out of its message and held to the rules a
  // local parent holds its child's verdict and delta to (sandbox/delta.h
  // DeltaRules): the first rule broken is the error, and nothing is copied
  // past it. Prose is repaired and bounded (docs/wire-protocol.md).
  std::expected<Reconciliation, Status> reconciliation_of(
      const std::string& route, std::uint64_t request, const WorkerId& worker, const TrialId& trial,
      Attempt attempt, schema::wire::Report::Reader report, Instant now);

  // Writes one reconciliation into `writer`: the fork with the reported
  // delta (the first `count` events; none when the store refused them), and
  // its trial.reconciled record and its verdict into `records` and
  // `verdicts` (append_to_log writes them as one trial.settled event). It
  // changes nothing outside the store: a transaction body may run again.
  store::Result<std::uint64_t> record_reconciliation(store::Writer& writer, const Reconciliation& r,
                                                     const sandbox::TrialVerdict& v,
                                                     std::uint64_t count, Records& records,
                                                     std::vector<Verdict>& verdicts);

  // After the commit that recorded `r` (with `v`): the scheduler, the
  // results and the worker hear of it.
  void reconciled(const Reconciliation& r, const sandbox::TrialVerdict& v,
                  std::uint64_t result_seq);

  // The turn's one transaction: every record kept so far and every report
  // accepted this turn. When the store refuses it (a report whose delta it
  // will not take), each report is recorded by itself instead, so one bad
  // report costs only its own delta.
  bool write_turn();

  // One report in a transaction of its own (with the records kept so far):
  // its delta if the store takes it, else the fork without it, else the
  // attempt failed.
  void reconcile_alone(Reconciliation& r);

  ordered_json result_json(const TrialId& trial, Attempt attempts, const SubmittedTrial& submitted,
                           const sandbox::TrialVerdict& verdict, const WorkerId& worker);

  void on_fetch(const std::string& route, Envelope::Reader envelope);

  // ---- clients

  void on_find_missing(const std::string& route, Envelope::Reader envelope);

  void on_put_blob(const std::string& route, Envelope::Reader envelope, Instant now);

  void on_submit(const std::string& route, Envelope::Reader envelope, Instant now);

  // Why the archive blob `archive` cannot stand for a pack pinned to `pin`:
  // not uploaded, not an archive, or holding a tree of another bundle hash.
  // Each (archive, pin) is read once per submission.
  // What the check of a bundle found: a problem, or the executor of its pack.
  struct CheckedBundle {
    std::optional<std::string> problem;
    pack::Executor executor = pack::Executor::lua;
    bool deterministic = false;  // its manifest declares it deterministic
  };
  static const CheckedBundle& check_bundle(
      const store::Snapshot& snapshot, const Digest& archive, const Digest& pin,
      std::map<std::pair<Digest, Digest>, CheckedBundle>& checked);

  // The seq of the trial's fork point in its parent's history, found in
  // `snapshot`; refused when the client may not fork the parent or the
  // event is not in its history. Its segment is stored once the
  // submission is accepted (on_submit).
  std::expected<std::uint64_t, Status> fork_point_of(const store::Snapshot& snapshot,
                                                     const sandbox::TrialSpecification& spec);

  // ---- the result cache (coordinator/result_cache.h)

  // The runtime cache keys name: config_.runtime_version, or this build's.
  std::string cache_runtime() const;
  // Of a job about to be submitted: a key that more than one of its trials
  // has (a matrix's repeats, which sample nondeterminism) is dropped, so
  // those trials all run and none of their results is cached.
  static void drop_repeated_keys(std::vector<TrialInput>& inputs);
  // The new job's trials with a key may be answered from the cache: they
  // are looked up in the transaction that records the job.
  void note_cache_candidates(const JobId& job);
  // In the caller's write transaction, what every commit of pending_
  // writes: `records` with their verdicts, then for each candidate whose
  // key has a live entry, read in this same transaction (so that gc cannot
  // collect the source's fork between the look-up and the copy): a copy of
  // the source's fork, its trial.cached record, and a trial.verdict event
  // with the source's verdict naming it (`cached_from`). The scheduler
  // applies the trial.cached records once the transaction has committed
  // (pending_committed).
  store::Result<std::uint64_t> append_records(store::Writer& writer,
                                              std::span<const OrchestrationRecord> records,
                                              std::span<Verdict> verdicts);
  // A trial of a job submitted this turn that may be answered from the
  // cache, and what the last transaction body decided for it. Small: a
  // job of a million candidates holds no specification here.
  struct Answer {
    TrialId trial;
    Digest key;
    std::optional<TrialCached> record{};  // answered: its record
    std::uint64_t seq = 0;                // its verdict's event, once written
  };
  std::vector<Answer> answering_;

  ordered_json status_json(const JobStatus& job, Instant now) const;
  // Why the job's queued trials are not being leased (no live worker, or
  // none offering their executor), as text; null when nothing stops them.
  ordered_json waiting_reason(const JobStatus& job) const;

  static ordered_json timestamp_json(Instant at);

  // What `status` answers: every job, or with `mine` those the client of the
  // message being handled may read.
  // Both say why the store takes no writes (store_full) and warn when its
  // disk is nearly full (disk_warning); the list also holds the store's
  // room (store_disk).
  ordered_json jobs_doc(Instant now, bool mine = false) const;
  ordered_json job_doc(const JobStatus& status, Instant now) const;
  void add_store_warnings(ordered_json& doc) const;

  void reply_json(const std::string& route, std::uint64_t request, const ordered_json& doc,
                  bool workers);

  // Whether the client of the message being handled may act on `job`: its
  // owner, an administrator, or anyone when the coordinator has no keys.
  bool may_act_on(const JobStatus& job) const;
  // What the status page shows and why it may ("every client's jobs: ..."),
  // or none when it may not: client keys, on an address not loopback that
  // the operator did not declare private.
  std::optional<std::string> status_view() const;
  // Orchestration records set aside at start, as they did not apply (shown
  // in every status, logged once).
  std::vector<SetAside> set_aside_;
  // Whether the client of the message being handled may name `run` as a
  // parent, of a job's trials or of an imported fork: never one of the
  // coordinator's own runs (its log, archives and trials' forks hold other
  // clients' jobs), and with keys a run another client imported only for an
  // administrator. no_run_to_fork says why not, without telling whether
  // another client's run exists.
  bool may_fork(const store::RunInfo& run) const;
  std::string no_run_to_fork(const std::string& run) const;

  // The refusal of a client acting on a job it may not: said the same for a
  // job of another owner and for none, so a key learns nothing of others'.
  void refuse_not_theirs(const std::string& route, std::uint64_t request, const std::string& job,
                         std::string_view what);

  void on_status(const std::string& route, Envelope::Reader envelope);
  // Held status requests are answered when their job has finished or is
  // gone, or when their hold has passed: a waiting client hears of the end
  // in the turn that brings it, and asks nothing per trial.
  void serve_held_statuses(Instant now);

  void on_cancel(const std::string& route, Envelope::Reader envelope, Instant now);

  // importRun: the uploaded JSON Lines file imported as a new run (or fork)
  // of the coordinator's store, in one transaction; a resend of one already
  // imported (same id, label and parent) is answered with that run.
  void on_import_run(const std::string& route, Envelope::Reader envelope);
  void reply_run(const std::string& route, std::uint64_t request, const store::RunInfo& run);

  void on_results(const std::string& route, Envelope::Reader envelope);

  // The trial's line of `results`: its result once reconciled; before, what
  // is known (its status, and the reasons of its failed attempts). One
  // snapshot serves every line of a request.
  std::string result_line(const TrialId& trial, const store::Snapshot& snapshot);

  void on_workers(const std::string& route, std::uint64_t request);

  // What `workers` answers.
  ordered_json workers_doc() const;

  // ---- the store's room: looked at once a second, for the gauges and the
  // status (coordinator/store_disk.h); a warning is logged when it appears
  // and when it goes.

  void look_at_store();

  // ---- the status API (coordinator/status_page.h), on this thread

  transport::HttpResponse answer_api(const transport::HttpRequest& request);

  // The candidates of the job ranked as `results --by candidate` ranks them,
  // the first kRankedShown.
  ordered_json candidates_doc(const JobStatus& job) const;

  // The trials that ended without completing, newest first (of `job` only,
  // when given): each its line of `results`, with when it ended.
  ordered_json failures_doc(const std::optional<std::string>& job);

  const ServerConfig& config_;
  World& world_;  // every clock, random number and free-space reading
  const sandbox::Cancellation& stop_;
  const Log& log_;
  // Taken before the store is opened and its log replayed, held until the
  // server is gone: one coordinator a store (store/writer_lock.h).
  store::WriterLock lock_;
  store::EventStore store_;
  UploadSpool uploads_;  // blobs clients are uploading, spilled to disk
  Scheduler scheduler_;
  zmq::context_t context_;
  std::optional<zmq::socket_t> socket_;       // none for a CoordinatorCore
  std::optional<transport::ZapHandler> zap_;  // with CURVE
  // A worker's offer of slots that found no work, waiting for some.
  struct Parked {
    WorkerId worker;
    std::uint32_t free = 0;
    std::uint64_t request = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::string, Parked> parked_;  // by routing id
  // A client's status request waiting for its job to finish; one per
  // client connection (a later request replaces it: the client gave up on
  // the earlier one).
  struct HeldStatus {
    JobId job;
    std::uint64_t request = 0;
    std::chrono::steady_clock::time_point until;
  };
  std::map<std::string, HeldStatus> held_statuses_;  // by routing id
  std::map<std::pair<std::uint64_t, std::string>, ForkPointFacts> fork_points_;
  Records pending_;                          // applied, not yet in the store
  std::vector<Reconciliation> reconciling_;  // reports accepted this turn, not yet in the store
  SpecCache specs_;
  std::map<TrialId, SubmittedTrial> submitted_;              // parsed, of trials leased
  std::vector<std::pair<std::string, std::string>> outbox_;  // (route, frame), after the commit
  std::map<std::string, Peer> peers_;                        // by routing id
  std::map<WorkerId, std::string> worker_routes_;
  std::map<WorkerId, WorkerInfo> worker_info_;

  // Each trial's result event in the log (its seq; 0: none yet), by
  // job, in trial order. Seqs of the log as it is: a compaction renumbers
  // them (compact_log_now).
  std::unordered_map<std::string, std::vector<std::uint64_t>> result_seqs_;
  // The log's last snapshot (none yet: generation 0 at seq 0), and the head
  // at which it is compacted next.
  LogSnapshot log_snapshot_;
  std::uint64_t compact_at_ = 0;
  std::uint64_t errors_ = 0;
  std::uint64_t undelivered_ = 0;          // replies ZeroMQ would not take
  bool trim_ = false;                      // a submission was handled this turn
  std::optional<std::string> store_full_;  // why, while the store takes no writes
  CoordinatorMetrics metrics_;
  bool gauges_stale_ = true;  // the scheduler changed since metrics_ last observed it
  Activity activity_;         // recent failures and pace, for the status API
  transport::Probes probes_;
  transport::LoopHandoff api_;                 // the status API's requests, for this thread
  std::optional<transport::HttpServer> http_;  // last: it stops before what it reads
  std::set<std::string> bound_ids_;            // worker ids the allow list binds to a key
  std::optional<std::string> bound_id_;        // that of the message being handled
  std::optional<std::string> worker_key_;      // that of the message being handled
  // Hellos that ended a live incarnation's leases, by who said them (the
  // worker's key; none without keys): the times of the last ones, within
  // kQuarantineWindow. Who says kQuarantineAfter of them is quarantined for
  // the life of this process: its hellos are refused, naming why.
  std::map<std::string, std::deque<Instant>> lease_ending_hellos_;
  std::map<std::string, std::string> quarantined_;   // who -> why
  std::map<WorkerId, std::string> quarantined_ids_;  // the ids they joined as -> why
  static constexpr std::size_t kQuarantineAfter = 2;
  static constexpr Duration kQuarantineWindow{600'000};
  std::optional<transport::ClientIdentity> client_;  // that of the message being handled
  // Jobs being submitted in parts, by id: what their parts so far held.
  struct PendingJob {
    std::string name;
    int priority = 0;
    std::uint32_t parts = 0;
    std::string owner;
    std::uint32_t next = 0;  // the part expected next
    std::vector<TrialInput> inputs;
    Instant last;
    std::uint64_t bytes = 0;  // of the inputs' payloads
  };
  std::map<std::string, PendingJob> pending_jobs_;

  static constexpr std::size_t kMaxPendingJobs = 16;
  static constexpr Duration kPendingJobIdle{60'000};

  std::size_t pending_trials() const;
  // The payload bytes of jobs being submitted in parts, of every client or
  // of `owner`'s.
  std::uint64_t pending_bytes(std::optional<std::string_view> owner = std::nullopt) const;

  // The turn accepted a submission or a cancel: its commit is flushed whole,
  // meta page included, before anything is answered.
  bool turn_durable_ = false;
  // The requests of this turn whose answers depend on its commit: (route, id).
  std::set<std::pair<std::string, std::uint64_t>> turn_writes_;
  std::chrono::steady_clock::time_point next_probe_;
  std::chrono::steady_clock::time_point last_full_log_;
  std::chrono::seconds probe_wait_{1};
  // The store's room as last looked at (look_at_store), and when to look next.
  StoreDisk disk_;
  std::optional<std::string> disk_warning_;
  std::optional<std::chrono::steady_clock::time_point> next_store_look_;
};

}  // namespace forktrial::coordinator::detail
