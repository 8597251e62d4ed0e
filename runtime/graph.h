// The graph: the state a run's event log projects to.
//
// Only five event types change it (payload shapes in docs/runtime-semantics.md):
//   object.created    {id, type, data}        a new object, version 1
//   object.removed    {id}                    the object and every relation touching it
//   relation.created  {id, src, dst, type, data}
//   relation.removed  {id}
//   patch.applied     {id, patch}             shallow merge into data, version + 1
// Every other type leaves the graph unchanged. Ids are "<type>#N"; `next_id`
// continues after the largest N seen for that type (objects and relations
// share one counter per type name, so their ids never collide), and no id is
// ever used twice, even after removal.
//
// `apply` checks the payload and its references before changing anything; an
// error leaves the graph as it was. Pointers returned by lookups stay valid
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

namespace forktrial::runtime {

struct GraphObject {
  std::string id;
  std::string type;
  nlohmann::json data = nlohmann::json::object();
  std::uint64_t version = 1;
};

struct GraphRelation {
  std::string id;
  std::string src;
  std::string dst;
  std::string type;
  nlohmann::json data = nlohmann::json::object();
};

class Graph {
 public:
  // True for the five types above.
  static bool changes_state(std::string_view event_type);

  // Applies one event. Errors say which field or reference is wrong.
  std::expected<void, std::string> apply(std::string_view event_type,
                                         const nlohmann::json& payload);

  const GraphObject* object(std::string_view id) const;
  const GraphRelation* relation(std::string_view id) const;
  // True when `id` named an object or relation that has since been removed.
  bool was_removed(std::string_view id) const { return removed_.contains(std::string(id)); }

  // Live objects (of `type`, when given) in creation order.
  std::vector<const GraphObject*> objects(std::optional<std::string_view> type = {}) const;
  // Live relations (of `type`, when given) in creation order.
  std::vector<const GraphRelation*> relations(std::optional<std::string_view> type = {}) const;

  // The id the next object or relation of `type` gets: "<type>#N"; an error
  // once N would pass 2^64 - 1 (the counter never wraps around to reuse
  // small numbers).
  std::expected<std::string, std::string> next_id(std::string_view type) const;

 private:
  void note_id(const std::string& id, const std::string& type);
  void drop_relation(const std::string& id);

  std::unordered_map<std::string, GraphObject> objects_;
  std::unordered_map<std::string, GraphRelation> relations_;
  std::map<std::uint64_t, std::string> object_order_;    // creation rank -> id
  std::map<std::uint64_t, std::string> relation_order_;  // creation rank -> id
  std::unordered_map<std::string, std::uint64_t> rank_;  // live id -> creation rank
  std::uint64_t next_rank_ = 0;
  std::set<std::string> used_ids_;
  std::set<std::string> removed_;
  std::map<std::string, std::uint64_t, std::less<>> largest_;  // type -> largest N seen
};

}  // namespace forktrial::runtime
