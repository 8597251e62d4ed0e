// The payloads of the graph events the runtime writes, laid out the way
// activegraph's Graph builders write them (activegraph/core/graph.py:
// add_object, add_relation, patch_object, propose_patch, apply_patch,
// reject_patch, _provenance, _diff), so activegraph can replay what a trial
// wrote. Pure functions of their arguments; the caller mints the ids
// (runtime/id_mint.h) and checks what may be changed.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/graph.h"

namespace forktrial::runtime {

// Who writes an event and when: what activegraph's _provenance records.
struct Stamp {
  std::string actor;                     // provenance.created_by
  std::optional<std::string> caused_by;  // provenance.caused_by_event
  std::string timestamp;                 // the event's own timestamp
  std::string run_id;
};

// {created_by, caused_by_event, frame_id (always null: forktrial has no
// frames), timestamp, evidence, run_id}
nlohmann::ordered_json provenance(
    const Stamp& stamp, const nlohmann::ordered_json& evidence = nlohmann::ordered_json::array());

// {"object": {id, type, data, version: 1, provenance}, "id"}. A "provenance"
// key in `data` is dropped (activegraph's _strip_provenance).
nlohmann::ordered_json object_created(const std::string& id, const std::string& type,
                                      nlohmann::ordered_json data, const Stamp& stamp);

// {"relation": {id, source, target, type, data, provenance}, "id", "source", "target"}
nlohmann::ordered_json relation_created(const std::string& id, const std::string& source,
                                        const std::string& target, const std::string& type,
                                        nlohmann::ordered_json data, const Stamp& stamp);

// {"id"}: object.removed and relation.removed alike.
nlohmann::ordered_json removed(const std::string& id);

// Per field of `updates` whose value differs from `old`'s: {"old", "new"}
// (old null when the field was missing). Empty when `old` is not an object.
nlohmann::ordered_json diff(const nlohmann::ordered_json& old,
                            const nlohmann::ordered_json& updates);

// patch_object: an update applied at once.
// {"patch": {..., op: "update", expected_version: target.version,
//  proposed_by: actor, status: "applied"}, "target", "diff"}
nlohmann::ordered_json patch_applied_directly(
    const std::string& patch_id, const GraphObject& target, nlohmann::ordered_json updates,
    const Stamp& stamp, const nlohmann::ordered_json& rationale = nullptr,
    const nlohmann::ordered_json& evidence = nlohmann::ordered_json::array());

// propose_patch: {"patch": {..., status: "proposed"}}; expected_version is
// the target's version, 0 when it does not exist.
nlohmann::ordered_json patch_proposed(
    const std::string& patch_id, const std::string& target_id, const GraphObject* target,
    const std::string& op, nlohmann::ordered_json value, const Stamp& stamp,
    const nlohmann::ordered_json& rationale = nullptr,
    const nlohmann::ordered_json& evidence = nlohmann::ordered_json::array());

// apply_patch of a proposed patch whose expected version holds:
// {"patch": {... status: "applied"}, "target", "diff", "approved_by"}
nlohmann::ordered_json patch_applied_from_proposal(const GraphPatch& patch,
                                                   const GraphObject* target,
                                                   const std::string& approved_by);

// reject_patch, or apply_patch on a version mismatch:
// {"patch_id", "target", "reason", "current_version"}
nlohmann::ordered_json patch_rejected(const GraphPatch& patch, const GraphObject* target,
                                      const std::string& reason);

// The reason apply_patch records when the target's version moved on:
// "version mismatch: expected E, got C".
std::string version_mismatch_reason(const GraphPatch& patch, const GraphObject* target);

}  // namespace forktrial::runtime
