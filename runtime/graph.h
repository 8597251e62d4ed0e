// The graph: the state a run's event log projects to, by activegraph's rules
// (its projector `apply_event`, activegraph/core/graph.py), so that a history
// activegraph wrote projects here to the same objects, relations and patches.
//
// Seven event types change it (payload shapes in docs/runtime-semantics.md):
//   object.created    {"object": {id, type, data, version, provenance}, "id"}
//                     puts the object (an id already present is overwritten
//                     in place, keeping its position in creation order)
//   object.removed    {"id"}  drops the object if present, and every relation
//                     whose source or target is that id (even if it was not)
//   relation.created  {"relation": {id, source, target, type, data, provenance}, ...}
//                     puts the relation; its endpoints need not exist
//   relation.removed  {"id"}  drops the relation if present
//   patch.proposed    {"patch": {id, target, op, value, expected_version,
//                     proposed_by, ...}}  records the patch
//   patch.applied     {"patch": {...}, "target", "diff"}  records the patch as
//                     applied; if its target exists, op "update" merges value's
//                     top-level keys into data, op "replace" replaces data, and
//                     the version goes up by one (a missing target is tolerated)
//   patch.rejected    {"patch_id", "reason", ...}  marks a known patch rejected
// Every other type leaves the graph unchanged.
//
// `apply` refuses (and changes nothing) exactly where activegraph's projector
// raises: a missing required field, an op other than update/replace, an
// update whose value or target data is not a JSON object. It is stricter in
// one respect, stated in the errors: ids, types and targets must be strings,
// and a version must be an integer. Pointers returned by lookups stay valid
// until the next `apply`. Thread-compatible.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.h"

namespace forktrial::runtime {

struct GraphObject {
  std::string id;
  std::string type;
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
  std::int64_t version = 1;
  nlohmann::ordered_json provenance = nlohmann::ordered_json::object();
};

struct GraphRelation {
  std::string id;
  std::string source;
  std::string target;
  std::string type;
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
  nlohmann::ordered_json provenance = nlohmann::ordered_json::object();
};

// A patch as activegraph's Patch.to_dict() lays it out.
struct GraphPatch {
  std::string id;
  std::string target;
  std::string op;  // "update" or "replace"
  nlohmann::ordered_json value = nlohmann::ordered_json::object();
  nlohmann::ordered_json expected_version = 0;
  nlohmann::ordered_json proposed_by;
  nlohmann::ordered_json rationale;  // null when none
  nlohmann::ordered_json evidence = nlohmann::ordered_json::array();
  std::string status = "proposed";          // proposed | applied | rejected
  nlohmann::ordered_json rejection_reason;  // null unless rejected
  nlohmann::ordered_json provenance = nlohmann::ordered_json::object();

  // {id, target, op, value, expected_version, proposed_by, rationale,
  //  evidence, status, rejection_reason, provenance}
  nlohmann::ordered_json to_json() const;
};

class Graph {
 public:
  // True for the seven types above.
  static bool changes_state(std::string_view event_type);

  // Applies one event. Errors say which field is wrong.
  std::expected<void, Status> apply(std::string_view event_type,
                                    const nlohmann::ordered_json& payload);

  const GraphObject* object(std::string_view id) const;
  const GraphRelation* relation(std::string_view id) const;
  const GraphPatch* patch(std::string_view id) const;
  // True when `id` named an object or relation that has since been removed
  // (and not put again).
  bool was_removed(std::string_view id) const { return removed_.contains(std::string(id)); }

  // Objects (of `type`, when given) in creation order.
  std::vector<const GraphObject*> objects(std::optional<std::string_view> type = {}) const;
  // Relations (of `type`, when given) in creation order.
  std::vector<const GraphRelation*> relations(std::optional<std::string_view> type = {}) const;
  // Patches in the order they were first recorded.
  std::vector<const GraphPatch*> patches() const;

  // The whole state as JSON, for comparisons:
  // {"objects": [...], "relations": [...], "patches": [...]}, each in the
  // order above, each item as activegraph's to_dict() lays it out.
  nlohmann::ordered_json to_json() const;

 private:
  // Items keyed by id, with the order of first insertion kept the way a
  // Python dict keeps it: overwriting keeps the position, removing forgets it.
  template <typename Item>
  struct Table {
    std::unordered_map<std::string, Item> items;
    std::map<std::uint64_t, std::string> order;           // rank -> id
    std::unordered_map<std::string, std::uint64_t> rank;  // id -> rank
    void put(Item item, std::uint64_t& next_rank);
    bool erase(const std::string& id);
    std::vector<const Item*> in_order() const;
  };

  std::expected<void, Status> apply_patch_event(std::string_view event_type,
                                                const nlohmann::ordered_json& payload);

  Table<GraphObject> objects_;
  Table<GraphRelation> relations_;
  Table<GraphPatch> patches_;
  std::uint64_t next_rank_ = 0;
  std::set<std::string> removed_;
};

}  // namespace forktrial::runtime
