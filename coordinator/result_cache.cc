#include "coordinator/result_cache.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/timestamp.h"
#include "coordinator/orchestration_log.h"

namespace forktrial::coordinator {

namespace {

using nlohmann::ordered_json;

// What the key's text starts with: a new rule for keys takes a new tag, so
// that no key of the old rule can answer a trial of the new.
// v2: the owner is part of the key.
constexpr std::string_view kKeyTag = "forktrial.trial-cache.v2";
constexpr std::string_view kCacheRunPrefix = "forktrial.cache.";

}  // namespace

Digest trial_cache_key(std::string_view runtime, pack::Executor executor,
                       const sandbox::TrialSpecification& spec, const Digest& segment,
                       std::span<const Digest> bundles, std::string_view owner) {
  // The label names the fork and nothing a trial does: repeats differ by
  // their labels only, and so do a batch's trials submitted again under
  // another name.
  sandbox::TrialSpecification unlabelled = spec;
  unlabelled.label.clear();
  ordered_json archives = ordered_json::array();
  for (const Digest& bundle : bundles) archives.push_back(bundle.str());
  // A JSON array: each part is delimited, so no two inputs give one text.
  const ordered_json key = {std::string(kKeyTag),
                            std::string(runtime),
                            std::string(pack::executor_name(executor)),
                            segment.str(),
                            sandbox::to_canonical_json(unlabelled),
                            std::move(archives),
                            std::string(owner)};
  return Sha256::of(key.dump());
}

store::RunId cache_run_of(const Digest& key) {
  return store::RunId(std::string(kCacheRunPrefix) + key.hex());
}

namespace {

// Snapshot and Writer read alike.
template <typename Reader>
std::optional<CacheEntry> entry_in(const Reader& snapshot, const Digest& key) {
  const auto run = snapshot.run(cache_run_of(key));
  if (!run || run->head == 0) return std::nullopt;
  std::optional<CacheEntry> entry;
  snapshot.for_each_event(*run, run->head, [&](const store::EventView& event) {
    if (event.type != kCacheEntryType) return false;
    const auto doc = ordered_json::parse(event.payload, nullptr, false);
    if (!doc.is_object()) return false;
    const auto source = doc.find("source");
    const auto fork = doc.find("fork");
    const auto outcome = doc.find("outcome");
    const auto verdict = doc.find("verdict");
    if (source == doc.end() || !source->is_object() || !(*source)["job"].is_string() ||
        !(*source)["index"].is_number_unsigned() || fork == doc.end() || !fork->is_string() ||
        outcome == doc.end() || !outcome->is_string() || verdict == doc.end() ||
        !verdict->is_object()) {
      return false;
    }
    const auto parsed = outcome_from_name(outcome->get<std::string>());
    if (!parsed) return false;
    const auto worker = doc.find("worker");
    entry = CacheEntry{
        TrialId{JobId((*source)["job"].get<std::string>()),
                (*source)["index"].get<std::uint32_t>()},
        store::RunId(fork->get<std::string>()), *parsed, verdict->dump(),
        WorkerId(worker != doc.end() && worker->is_string() ? worker->get<std::string>() : "")};
    return false;
  });
  // An entry dies with its fork: gc collected the source's fork.
  if (entry && !snapshot.run(entry->fork)) return std::nullopt;
  return entry;
}

}  // namespace

std::optional<CacheEntry> find_cache_entry(const store::Snapshot& snapshot, const Digest& key) {
  return entry_in(snapshot, key);
}

std::optional<CacheEntry> find_cache_entry(const store::Writer& writer, const Digest& key) {
  return entry_in(writer, key);
}

store::Result<std::uint64_t> put_cache_entry(store::Writer& writer, const Digest& key,
                                             const CacheEntry& entry, Instant at) {
  const store::RunId id = cache_run_of(key);
  auto run = writer.run(id);
  if (!run) {
    auto created = writer.create_run(store::NewRun{.id = id, .label = "result cache entry"});
    if (!created) return std::unexpected(std::move(created.error()));
    run = std::move(*created);
  }
  ordered_json payload = ordered_json::object();
  payload["source"] = {{"job", entry.source.job.str()}, {"index", entry.source.index}};
  payload["fork"] = entry.fork.str();
  payload["outcome"] = std::string(outcome_name(entry.outcome));
  payload["verdict"] = ordered_json::parse(entry.verdict, nullptr, false);
  payload["worker"] = entry.worker.str();
  store::NewEvent event;
  event.id = store::numbered_event_id(run->head + 1);
  event.type = std::string(kCacheEntryType);
  event.payload = payload.dump();
  event.timestamp = format_timestamp(std::max<UnixMillis>(0, at.time_since_epoch().count()));
  event.actor = std::string(kCoordinatorActor);
  return writer.append(id, run->head, std::span(&event, 1));
}

store::Result<std::uint64_t> copy_fork(store::Writer& writer,
                                       const sandbox::TrialSpecification& spec,
                                       const store::NewRun& fork, const store::RunId& source) {
  const auto from = writer.run(source);
  if (!from || !from->fork_of) {
    return std::unexpected(
        store::Refusal(store::Refused::unknown_run, "no fork " + source.str() + " to copy"));
  }
  auto made = writer.fork(spec.parent_run_id, spec.at_event, fork);
  if (!made) return std::unexpected(std::move(made.error()));
  // Faithful to its own run: where the source's events name their run (the
  // runtime's provenance.run_id; a candidate writing rt.run_id), the copy's
  // name it. Run ids are plain ASCII, the same in a payload's JSON text.
  const std::string& from_id = source.str();
  const std::string& to_id = fork.id.value().str();
  std::vector<store::NewEvent> events;
  writer.for_each_event(*from, from->fork_of->seq + 1, [&](const store::EventView& event) {
    store::NewEvent copy = static_cast<store::NewEvent>(event.to_event());
    if (auto at = copy.payload.find(from_id); at != std::string::npos) {
      std::string renamed = copy.payload;
      for (; at != std::string::npos; at = renamed.find(from_id, at + to_id.size())) {
        renamed.replace(at, from_id.size(), to_id);
      }
      // A longer id must not make a payload the store took one it refuses,
      // which would fail the whole commit: such a payload is copied as is.
      if (renamed.size() <= store::kMaxPayloadBytes) copy.payload = std::move(renamed);
    }
    events.push_back(std::move(copy));
    return true;
  });
  if (events.empty()) return made->head;
  return writer.append(fork.id.value(), made->head, events);
}

}  // namespace forktrial::coordinator
