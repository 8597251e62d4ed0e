#include "runtime/graph_events.h"

#include <utility>

namespace forktrial::runtime {

using json = nlohmann::ordered_json;

namespace {

json without_provenance(json data) {
  if (data.is_object()) data.erase("provenance");
  return data;
}

json version_of(const GraphObject* target) {
  return target == nullptr ? json(0) : json(target->version);
}

}  // namespace

json provenance(const Stamp& stamp, const json& evidence) {
  return {{"created_by", stamp.actor},
          {"caused_by_event", stamp.caused_by ? json(*stamp.caused_by) : json(nullptr)},
          {"frame_id", nullptr},
          {"timestamp", stamp.timestamp},
          {"evidence", evidence.is_array() ? evidence : json::array()},
          {"run_id", stamp.run_id}};
}

json object_created(const std::string& id, const std::string& type, json data, const Stamp& stamp) {
  return {{"object",
           {{"id", id},
            {"type", type},
            {"data", without_provenance(std::move(data))},
            {"version", 1},
            {"provenance", provenance(stamp)}}},
          {"id", id}};
}

json relation_created(const std::string& id, const std::string& source, const std::string& target,
                      const std::string& type, json data, const Stamp& stamp) {
  return {{"relation",
           {{"id", id},
            {"source", source},
            {"target", target},
            {"type", type},
            {"data", without_provenance(std::move(data))},
            {"provenance", provenance(stamp)}}},
          {"id", id},
          {"source", source},
          {"target", target}};
}

json removed(const std::string& id) {
  return {{"id", id}};
}

json diff(const json& old, const json& updates) {
  json out = json::object();
  if (!updates.is_object()) return out;
  for (const auto& [key, value] : updates.items()) {
    const json* before = nullptr;
    if (old.is_object()) {
      if (const auto it = old.find(key); it != old.end()) before = &*it;
    }
    if (before == nullptr || *before != value) {
      out[key] = {{"old", before == nullptr ? json(nullptr) : *before}, {"new", value}};
    }
  }
  return out;
}

json patch_applied_directly(const std::string& patch_id, const GraphObject& target, json updates,
                            const Stamp& stamp, const json& rationale, const json& evidence) {
  GraphPatch patch;
  patch.id = patch_id;
  patch.target = target.id;
  patch.op = "update";
  patch.value = without_provenance(std::move(updates));
  patch.expected_version = target.version;
  patch.proposed_by = stamp.actor;
  patch.rationale = rationale;
  patch.evidence = evidence.is_array() ? evidence : json::array();
  patch.status = "applied";
  patch.provenance = provenance(stamp, evidence);
  json changes = diff(target.data, patch.value);
  return {{"patch", patch.to_json()}, {"target", target.id}, {"diff", std::move(changes)}};
}

json patch_proposed(const std::string& patch_id, const std::string& target_id,
                    const GraphObject* target, const std::string& op, json value,
                    const Stamp& stamp, const json& rationale, const json& evidence) {
  GraphPatch patch;
  patch.id = patch_id;
  patch.target = target_id;
  patch.op = op;
  patch.value = without_provenance(std::move(value));
  patch.expected_version = version_of(target);
  patch.proposed_by = stamp.actor;
  patch.rationale = rationale;
  patch.evidence = evidence.is_array() ? evidence : json::array();
  patch.status = "proposed";
  patch.provenance = provenance(stamp, evidence);
  return {{"patch", patch.to_json()}};
}

json patch_applied_from_proposal(const GraphPatch& patch, const GraphObject* target,
                                 const std::string& approved_by) {
  json record = patch.to_json();
  record["status"] = "applied";
  return {{"patch", std::move(record)},
          {"target", patch.target},
          {"diff", diff(target == nullptr ? json::object() : target->data, patch.value)},
          {"approved_by", approved_by}};
}

json patch_rejected(const GraphPatch& patch, const GraphObject* target, const std::string& reason) {
  return {{"patch_id", patch.id},
          {"target", patch.target},
          {"reason", reason},
          {"current_version", version_of(target)}};
}

std::string version_mismatch_reason(const GraphPatch& patch, const GraphObject* target) {
  return "version mismatch: expected " + patch.expected_version.dump() + ", got " +
         version_of(target).dump();
}

}  // namespace forktrial::runtime
