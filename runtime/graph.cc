#include "runtime/graph.h"

#include <charconv>
#include <limits>

namespace forktrial::runtime {
namespace {

using nlohmann::json;

std::expected<std::string, std::string> string_field(const json& payload, const char* key) {
  const auto it = payload.find(key);
  if (it == payload.end()) return std::unexpected(std::string("payload lacks \"") + key + "\"");
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return std::unexpected(std::string("payload field \"") + key +
                           "\" must be a non-empty string, got " + it->dump());
  }
  return it->get<std::string>();
}

std::expected<json, std::string> object_field(const json& payload, const char* key, bool required) {
  const auto it = payload.find(key);
  if (it == payload.end()) {
    if (required) return std::unexpected(std::string("payload lacks \"") + key + "\"");
    return json::object();
  }
  if (!it->is_object()) {
    return std::unexpected(std::string("payload field \"") + key +
                           "\" must be a JSON object, got " + it->dump());
  }
  return *it;
}

// The live items of `items` (of `type`, when given), in the order of `order`.
template <typename Item>
std::vector<const Item*> in_creation_order(const std::map<std::uint64_t, std::string>& order,
                                           const std::unordered_map<std::string, Item>& items,
                                           std::optional<std::string_view> type) {
  std::vector<const Item*> out;
  for (const auto& [rank, id] : order) {
    const Item& item = items.at(id);
    if (!type || item.type == *type) out.push_back(&item);
  }
  return out;
}

}  // namespace

bool Graph::changes_state(std::string_view event_type) {
  return event_type == "object.created" || event_type == "object.removed" ||
         event_type == "relation.created" || event_type == "relation.removed" ||
         event_type == "patch.applied";
}

std::expected<void, std::string> Graph::apply(std::string_view event_type, const json& payload) {
  if (!changes_state(event_type)) return {};
  if (!payload.is_object()) return std::unexpected("payload must be a JSON object");
  auto id = string_field(payload, "id");
  if (!id) return std::unexpected(id.error());

  if (event_type == "object.created" || event_type == "relation.created") {
    auto type = string_field(payload, "type");
    if (!type) return std::unexpected(type.error());
    auto data = object_field(payload, "data", false);
    if (!data) return std::unexpected(data.error());
    if (used_ids_.contains(*id)) {
      return std::unexpected("id \"" + *id + "\" is already used in this run");
    }
    if (event_type == "object.created") {
      objects_.emplace(*id, GraphObject{*id, *type, std::move(*data), 1});
      object_order_.emplace(next_rank_, *id);
    } else {
      auto src = string_field(payload, "src");
      if (!src) return std::unexpected(src.error());
      auto dst = string_field(payload, "dst");
      if (!dst) return std::unexpected(dst.error());
      for (const std::string* end : {&*src, &*dst}) {
        if (!objects_.contains(*end)) {
          return std::unexpected("relation \"" + *id + "\" refers to " +
                                 (removed_.contains(*end) ? "removed" : "unknown") + " object \"" +
                                 *end + "\"");
        }
      }
      relations_.emplace(*id, GraphRelation{*id, *src, *dst, *type, std::move(*data)});
      relation_order_.emplace(next_rank_, *id);
    }
    rank_.emplace(*id, next_rank_++);
    note_id(*id, *type);
    return {};
  }

  if (event_type == "relation.removed") {
    if (!relations_.contains(*id)) {
      return std::unexpected("relation.removed names " +
                             std::string(removed_.contains(*id) ? "removed" : "unknown") +
                             " relation \"" + *id + "\"");
    }
    drop_relation(*id);
    return {};
  }

  const auto object = objects_.find(*id);
  if (object == objects_.end()) {
    return std::unexpected(std::string(event_type) + " names " +
                           (removed_.contains(*id) ? "removed" : "unknown") + " object \"" + *id +
                           "\"");
  }
  if (event_type == "patch.applied") {
    auto patch = object_field(payload, "patch", true);
    if (!patch) return std::unexpected(patch.error());
    for (const auto& [key, value] : patch->items()) object->second.data[key] = value;
    ++object->second.version;
    return {};
  }

  // object.removed: the relations touching the object go with it.
  std::vector<std::string> touching;
  for (const auto& [relation_id, relation] : relations_) {
    if (relation.src == *id || relation.dst == *id) touching.push_back(relation_id);
  }
  for (const auto& relation_id : touching) drop_relation(relation_id);
  objects_.erase(object);
  object_order_.erase(rank_.at(*id));
  rank_.erase(*id);
  removed_.insert(*id);
  return {};
}

void Graph::drop_relation(const std::string& id) {
  relations_.erase(id);
  relation_order_.erase(rank_.at(id));
  rank_.erase(id);
  removed_.insert(id);
}

void Graph::note_id(const std::string& id, const std::string& type) {
  used_ids_.insert(id);
  // Only ids of the form "<type>#N" advance the counter; others (imported
  // from systems with other id schemes) are kept but cannot collide with
  // generated ones unless they take that form.
  if (id.size() <= type.size() + 1 || id.compare(0, type.size(), type) != 0 ||
      id[type.size()] != '#') {
    return;
  }
  std::uint64_t n = 0;
  const char* first = id.data() + type.size() + 1;
  const char* last = id.data() + id.size();
  const auto [end, error] = std::from_chars(first, last, n);
  if (error != std::errc{} || end != last) return;
  auto& largest = largest_[type];
  if (n > largest) largest = n;
}

const GraphObject* Graph::object(std::string_view id) const {
  const auto it = objects_.find(std::string(id));
  return it == objects_.end() ? nullptr : &it->second;
}

const GraphRelation* Graph::relation(std::string_view id) const {
  const auto it = relations_.find(std::string(id));
  return it == relations_.end() ? nullptr : &it->second;
}

std::vector<const GraphObject*> Graph::objects(std::optional<std::string_view> type) const {
  return in_creation_order(object_order_, objects_, type);
}

std::vector<const GraphRelation*> Graph::relations(std::optional<std::string_view> type) const {
  return in_creation_order(relation_order_, relations_, type);
}

std::expected<std::string, std::string> Graph::next_id(std::string_view type) const {
  const auto it = largest_.find(type);
  const std::uint64_t largest = it == largest_.end() ? 0 : it->second;
  if (largest == std::numeric_limits<std::uint64_t>::max()) {
    return std::unexpected("the id counter of type \"" + std::string(type) + "\" is exhausted (" +
                           std::string(type) + "#" + std::to_string(largest) +
                           " is taken); no new id of that type can be made");
  }
  return std::string(type) + "#" + std::to_string(largest + 1);
}

}  // namespace forktrial::runtime
