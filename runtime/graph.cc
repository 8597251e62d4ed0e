#include "runtime/graph.h"

#include <utility>

namespace forktrial::runtime {
namespace {

using json = nlohmann::ordered_json;

// `where` names the JSON object the field is read from ("payload",
// "payload.object", ...), so an error points at the exact field.
std::expected<const json*, Status> field(const json& object, const char* key,
                                         const std::string& where) {
  if (!object.is_object()) {
    return failure(ErrorCode::invalid_argument,
                   where + " must be a JSON object, got " + object.dump());
  }
  const auto it = object.find(key);
  if (it == object.end())
    return failure(ErrorCode::invalid_argument, where + " lacks \"" + key + "\"");
  return &*it;
}

std::expected<std::string, Status> string_field(const json& object, const char* key,
                                                const std::string& where) {
  auto value = field(object, key, where);
  if (!value) return std::unexpected(value.error());
  if (!(*value)->is_string()) {
    return failure(ErrorCode::invalid_argument,
                   where + " field \"" + key + "\" must be a string, got " + (*value)->dump());
  }
  return (*value)->get<std::string>();
}

json optional_field(const json& object, const char* key, json fallback) {
  const auto it = object.find(key);
  return it == object.end() ? std::move(fallback) : *it;
}

// activegraph's _patch_from_dict: six required fields, an op from the closed
// vocabulary, the rest defaulted.
std::expected<GraphPatch, Status> patch_from(const json& record) {
  const std::string where = "payload.patch";
  GraphPatch patch;
  auto id = string_field(record, "id", where);
  if (!id) return std::unexpected(id.error());
  auto target = string_field(record, "target", where);
  if (!target) return std::unexpected(target.error());
  auto op = string_field(record, "op", where);
  if (!op) return std::unexpected(op.error());
  if (*op != "update" && *op != "replace") {
    return failure(ErrorCode::invalid_argument,
                   where + " field \"op\" is \"" + *op +
                       "\"; the patch vocabulary is exactly update, replace");
  }
  for (const char* key : {"value", "expected_version", "proposed_by"}) {
    if (auto present = field(record, key, where); !present) return std::unexpected(present.error());
  }
  patch.id = std::move(*id);
  patch.target = std::move(*target);
  patch.op = std::move(*op);
  patch.value = record.at("value");
  patch.expected_version = record.at("expected_version");
  patch.proposed_by = record.at("proposed_by");
  patch.rationale = optional_field(record, "rationale", nullptr);
  patch.evidence = optional_field(record, "evidence", json::array());
  const json status = optional_field(record, "status", "proposed");
  patch.status = status.is_string() ? status.get<std::string>() : status.dump();
  patch.rejection_reason = optional_field(record, "rejection_reason", nullptr);
  patch.provenance = optional_field(record, "provenance", json::object());
  return patch;
}

}  // namespace

json GraphPatch::to_json() const {
  return {{"id", id},
          {"target", target},
          {"op", op},
          {"value", value},
          {"expected_version", expected_version},
          {"proposed_by", proposed_by},
          {"rationale", rationale},
          {"evidence", evidence},
          {"status", status},
          {"rejection_reason", rejection_reason},
          {"provenance", provenance}};
}

template <typename Item>
void Graph::Table<Item>::put(Item item, std::uint64_t& next_rank) {
  std::string id = item.id;
  if (const auto it = items.find(id); it != items.end()) {
    it->second = std::move(item);
    return;
  }
  order.emplace(next_rank, id);
  rank.emplace(id, next_rank++);
  items.emplace(std::move(id), std::move(item));
}

template <typename Item>
bool Graph::Table<Item>::erase(const std::string& id) {
  const auto it = rank.find(id);
  if (it == rank.end()) return false;
  order.erase(it->second);
  rank.erase(it);
  items.erase(id);
  return true;
}

template <typename Item>
std::vector<const Item*> Graph::Table<Item>::in_order() const {
  std::vector<const Item*> out;
  out.reserve(order.size());
  for (const auto& [r, id] : order) out.push_back(&items.at(id));
  return out;
}

bool Graph::changes_state(std::string_view event_type) {
  return event_type == "object.created" || event_type == "object.removed" ||
         event_type == "relation.created" || event_type == "relation.removed" ||
         event_type == "patch.proposed" || event_type == "patch.applied" ||
         event_type == "patch.rejected";
}

std::expected<void, Status> Graph::apply(std::string_view event_type, const json& payload) {
  if (!changes_state(event_type)) return {};
  if (!payload.is_object())
    return failure(ErrorCode::invalid_argument, "payload must be a JSON object");

  if (event_type == "object.created") {
    auto record = field(payload, "object", "payload");
    if (!record) return std::unexpected(record.error());
    const json& o = **record;
    const std::string where = "payload.object";
    GraphObject object;
    auto id = string_field(o, "id", where);
    if (!id) return std::unexpected(id.error());
    auto type = string_field(o, "type", where);
    if (!type) return std::unexpected(type.error());
    for (const char* key : {"data", "version", "provenance"}) {
      if (auto present = field(o, key, where); !present) return std::unexpected(present.error());
    }
    if (!o.at("version").is_number_integer()) {
      return failure(
          ErrorCode::invalid_argument,
          where + " field \"version\" must be an integer, got " + o.at("version").dump());
    }
    object.id = std::move(*id);
    object.type = std::move(*type);
    object.data = o.at("data");
    object.version = o.at("version").get<std::int64_t>();
    object.provenance = o.at("provenance");
    removed_.erase(object.id);
    objects_.put(std::move(object), next_rank_);
    return {};
  }

  if (event_type == "relation.created") {
    auto record = field(payload, "relation", "payload");
    if (!record) return std::unexpected(record.error());
    const json& r = **record;
    const std::string where = "payload.relation";
    GraphRelation relation;
    for (auto [key, out] :
         {std::pair{"id", &relation.id}, std::pair{"source", &relation.source},
          std::pair{"target", &relation.target}, std::pair{"type", &relation.type}}) {
      auto value = string_field(r, key, where);
      if (!value) return std::unexpected(value.error());
      *out = std::move(*value);
    }
    for (const char* key : {"data", "provenance"}) {
      if (auto present = field(r, key, where); !present) return std::unexpected(present.error());
    }
    relation.data = r.at("data");
    relation.provenance = r.at("provenance");
    removed_.erase(relation.id);
    relations_.put(std::move(relation), next_rank_);
    return {};
  }

  if (event_type == "object.removed" || event_type == "relation.removed") {
    auto id = string_field(payload, "id", "payload");
    if (!id) return std::unexpected(id.error());
    if (event_type == "relation.removed") {
      if (relations_.erase(*id)) removed_.insert(*id);
      return {};
    }
    if (objects_.erase(*id)) removed_.insert(*id);
    // The cascade runs whether or not the object was there: a relation left
    // dangling at an id that never was an object goes too.
    std::vector<std::string> touching;
    for (const auto* relation : relations_.in_order()) {
      if (relation->source == *id || relation->target == *id) touching.push_back(relation->id);
    }
    for (const auto& relation_id : touching) {
      relations_.erase(relation_id);
      removed_.insert(relation_id);
    }
    return {};
  }

  return apply_patch_event(event_type, payload);
}

std::expected<void, Status> Graph::apply_patch_event(std::string_view event_type,
                                                     const json& payload) {
  if (event_type == "patch.rejected") {
    auto patch_id = string_field(payload, "patch_id", "payload");
    if (!patch_id) return std::unexpected(patch_id.error());
    const auto it = patches_.items.find(*patch_id);
    if (it == patches_.items.end()) return {};  // an unknown patch: nothing to mark
    auto reason = field(payload, "reason", "payload");
    if (!reason) return std::unexpected(reason.error());
    it->second.status = "rejected";
    it->second.rejection_reason = **reason;
    return {};
  }

  auto record = field(payload, "patch", "payload");
  if (!record) return std::unexpected(record.error());
  auto patch = patch_from(**record);
  if (!patch) return std::unexpected(patch.error());
  if (event_type == "patch.proposed") {
    patches_.put(std::move(*patch), next_rank_);
    return {};
  }

  // patch.applied
  patch->status = "applied";
  const auto target = objects_.items.find(patch->target);
  if (target != objects_.items.end() && patch->op == "update") {
    if (!patch->value.is_object()) {
      return failure(ErrorCode::invalid_argument,
                     "payload.patch field \"value\" of an update must be a JSON object, got " +
                         patch->value.dump());
    }
    if (!target->second.data.is_object()) {
      return failure(ErrorCode::invalid_argument,
                     "object \"" + patch->target +
                         "\" has data that is not a JSON object, so an update cannot merge "
                         "into it");
    }
  }
  if (target != objects_.items.end()) {
    GraphObject& object = target->second;
    if (patch->op == "update") {
      for (const auto& [key, value] : patch->value.items()) object.data[key] = value;
    } else {
      object.data = patch->value;
    }
    ++object.version;
  }
  patches_.put(std::move(*patch), next_rank_);
  return {};
}

const GraphObject* Graph::object(std::string_view id) const {
  const auto it = objects_.items.find(std::string(id));
  return it == objects_.items.end() ? nullptr : &it->second;
}

const GraphRelation* Graph::relation(std::string_view id) const {
  const auto it = relations_.items.find(std::string(id));
  return it == relations_.items.end() ? nullptr : &it->second;
}

const GraphPatch* Graph::patch(std::string_view id) const {
  const auto it = patches_.items.find(std::string(id));
  return it == patches_.items.end() ? nullptr : &it->second;
}

std::vector<const GraphObject*> Graph::objects(std::optional<std::string_view> type) const {
  std::vector<const GraphObject*> out;
  for (const auto* object : objects_.in_order()) {
    if (!type || object->type == *type) out.push_back(object);
  }
  return out;
}

std::vector<const GraphRelation*> Graph::relations(std::optional<std::string_view> type) const {
  std::vector<const GraphRelation*> out;
  for (const auto* relation : relations_.in_order()) {
    if (!type || relation->type == *type) out.push_back(relation);
  }
  return out;
}

std::vector<const GraphPatch*> Graph::patches() const {
  return patches_.in_order();
}

json Graph::to_json() const {
  json out = {{"objects", json::array()}, {"relations", json::array()}, {"patches", json::array()}};
  for (const auto* o : objects()) {
    out["objects"].push_back({{"id", o->id},
                              {"type", o->type},
                              {"data", o->data},
                              {"version", o->version},
                              {"provenance", o->provenance}});
  }
  for (const auto* r : relations()) {
    out["relations"].push_back({{"id", r->id},
                                {"source", r->source},
                                {"target", r->target},
                                {"type", r->type},
                                {"data", r->data},
                                {"provenance", r->provenance}});
  }
  for (const auto* p : patches()) out["patches"].push_back(p->to_json());
  return out;
}

}  // namespace forktrial::runtime
