// The coordinator's runs: a client imports an activegraph JSON Lines run into
// the coordinator's store, as `forktrial run import` does into a local one.
#include <sstream>

#include "coordinator/server_impl.h"
#include "import/jsonl.h"

namespace forktrial::coordinator::detail {

namespace {

// The largest file a client imports: parsed and written on the loop thread,
// so that no client stalls the cluster for long with one import.
constexpr std::size_t kMaxImportBytes = std::size_t{64} << 20;

ordered_json run_json(const store::RunInfo& run) {
  ordered_json out{{"id", run.id.str()}, {"label", run.label}, {"events", run.head}};
  out["parent"] = run.fork_of ? ordered_json{{"run", run.fork_of->parent.str()},
                                             {"at", run.fork_of->event_id.str()}}
                              : ordered_json(nullptr);
  return out;
}

}  // namespace

void Server::on_import_run(const std::string& route, Envelope::Reader envelope) {
  const std::uint64_t request = envelope.getRequestId();
  const auto import = envelope.getImportRun();
  const auto blob = wire::digest_of(import.getBlob());
  if (!blob) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       "the file's digest is not 32 bytes");
  }
  const store::RunId id(wire::text(import.getRunId()));
  const std::string label = wire::text(import.getLabel());
  const std::string fork_of = wire::text(import.getForkOf());
  const std::string at = wire::text(import.getAt());
  if (id.empty()) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       "an imported run needs an id (the client chooses it)");
  }
  if (coordinator_run_id(id.str())) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       "run id " + id.str() +
                           " is the coordinator's own (run_job_... names its trials' forks, "
                           "forktrial.* its own runs); give the run another id");
  }
  if (fork_of.empty() != at.empty()) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       "a fork names both the run it forks and the event it branches after");
  }
  const std::string owner = client_ ? client_->key : std::string();
  const auto snapshot = store_.snapshot();
  if (const auto existing = snapshot.run(id)) {
    // A resend of an import that was committed is answered again: the same
    // client, the same file, label and fork point. Anything else under the
    // id (another client's file above all) is refused, or a client could
    // take a run another forks.
    if (existing->owner == owner && existing->source == *blob && existing->label == label &&
        (existing->fork_of ? existing->fork_of->parent.str() : std::string()) == fork_of &&
        (existing->fork_of ? existing->fork_of->event_id.str() : std::string()) == at) {
      return reply_run(route, request, *existing);
    }
    return reply_error(route, request, ErrorCode::conflict,
                       "the coordinator's store has a run " + id.str() +
                           " already, imported from another file or by another client; give "
                           "the run another id");
  }
  if (!fork_of.empty()) {
    const auto parent = snapshot.run(store::RunId(fork_of));
    if (!parent || !may_fork(*parent)) {
      return reply_error(route, request, ErrorCode::not_found, no_run_to_fork(fork_of));
    }
  }
  const auto bytes = snapshot.blob(*blob);
  if (!bytes) {
    return reply_error(route, request, ErrorCode::not_found,
                       "the file " + blob->str() + " was not uploaded");
  }
  if (bytes->size() > kMaxImportBytes) {
    return reply_error(route, request, ErrorCode::resource_exhausted,
                       "the file is " + std::to_string(bytes->size()) +
                           " bytes; a client imports at most " + std::to_string(kMaxImportBytes) +
                           " (larger runs are imported on the coordinator's host, into its "
                           "store, while it is stopped)");
  }
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  auto events = import::jsonl::parse_events(in);
  if (!events) {
    return reply_error(route, request, ErrorCode::invalid_argument,
                       events.error().message + "; nothing was imported");
  }
  const store::NewRun spec{.id = id, .label = label, .owner = owner, .source = *blob};
  auto run = fork_of.empty()
                 ? store_.import_run(spec, *events)
                 : import::jsonl::import_fork(store_, store::RunId(fork_of), store::EventId(at),
                                              spec, std::move(*events));
  if (!run) return reply_error(route, request, run.error());
  turn_durable_ = true;  // answered once it is on disk
  log_(LogLevel::info,
       "run " + run->id.str() + " imported with " + std::to_string(run->head) + " events");
  reply_run(route, request, *run);
}

void Server::reply_run(const std::string& route, std::uint64_t request, const store::RunInfo& run) {
  wire::MessageBuilder message;
  wire::start(message, request).initRunImported().setText(run_json(run).dump());
  reply(route, wire::encode(message));
}

}  // namespace forktrial::coordinator::detail
