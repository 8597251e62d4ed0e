#include "import/jsonl.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/text.h"
#include "base/timestamp.h"
#include "store/event_store.h"
#include "store/payload.h"

namespace forktrial::import::jsonl {

using store::event_text_problem;
using store::EventId;
using store::EventView;
using store::json_nesting_depth;
using store::kMaxPayloadDepth;
using store::NewEvent;
using store::payload_depth_problem;
using store::StoreError;

namespace {

using nlohmann::json;

std::string line_prefix(std::size_t line) {
  return "line " + std::to_string(line) + ": ";
}

// Reads a required non-empty string field, or says what is wrong with it.
std::expected<std::string, std::string> required_string(const json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end()) return std::unexpected(std::string("missing field \"") + field + "\"");
  if (!it->is_string()) {
    return std::unexpected(std::string("field \"") + field + "\" must be a string, found " +
                           it->type_name());
  }
  std::string value = it->get<std::string>();
  if (value.empty()) return std::unexpected(std::string("field \"") + field + "\" is empty");
  return value;
}

std::expected<std::optional<std::string>, std::string> nullable_string(const json& object,
                                                                       const char* field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) {
    return std::unexpected(std::string("field \"") + field + "\" must be a string or null, found " +
                           it->type_name());
  }
  return std::optional<std::string>(it->get<std::string>());
}

std::expected<NewEvent, std::string> event_from(const json& object) {
  if (!object.is_object()) {
    return std::unexpected(std::string("expected a JSON object, found ") + object.type_name());
  }
  NewEvent event;
  auto id = required_string(object, "id");
  if (!id) return std::unexpected(id.error());
  event.id = EventId(*id);
  auto type = required_string(object, "type");
  if (!type) return std::unexpected(type.error());
  event.type = *type;
  auto payload = object.find("payload");
  if (payload == object.end()) return std::unexpected("missing field \"payload\"");
  if (!payload->is_object()) {
    return std::unexpected(std::string("field \"payload\" must be an object, found ") +
                           payload->type_name());
  }
  event.payload = payload->dump();
  auto timestamp = required_string(object, "timestamp");
  if (!timestamp) return std::unexpected(timestamp.error());
  // The runtime's rule: a run that imports is a run every trial can read.
  if (auto parsed = parse_timestamp(*timestamp); !parsed) {
    return std::unexpected("field \"timestamp\": " + parsed.error());
  }
  event.timestamp = *timestamp;
  auto actor = nullable_string(object, "actor");
  if (!actor) return std::unexpected(actor.error());
  event.actor = *actor;
  auto frame = nullable_string(object, "frame_id");
  if (!frame) return std::unexpected(frame.error());
  event.frame_id = *frame;
  auto cause = nullable_string(object, "caused_by");
  if (!cause) return std::unexpected(cause.error());
  if (*cause) event.caused_by = EventId(**cause);
  if (auto problem = event_text_problem(event)) return std::unexpected(problem->message);
  return event;
}

}  // namespace

std::expected<std::string, std::string> normalize_payload(std::string_view text) {
  // Checked before parsing: the parse would succeed, but re-serializing a
  // payload nested tens of thousands of levels deep overflows the stack.
  if (auto deep = payload_depth_problem(text)) return std::unexpected(*deep);
  json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) return std::unexpected(std::string("not valid JSON"));
  if (!parsed.is_object()) {
    return std::unexpected(std::string("a JSON ") + parsed.type_name() + ", not an object");
  }
  return parsed.dump();
}

std::expected<std::vector<NewEvent>, LineError> parse_events(std::istream& in) {
  std::vector<NewEvent> events;
  std::unordered_map<std::string, std::size_t> first_line;
  std::string text;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto fail = [&](const std::string& why) {
      return std::unexpected(LineError{line, line_prefix(line) + why});
    };
    // One level for the event object around the payload.
    if (const std::size_t depth = json_nesting_depth(text); depth > kMaxPayloadDepth + 1) {
      return fail("the event is nested " + std::to_string(depth) +
                  " levels deep (arrays and objects); payloads may nest at most " +
                  std::to_string(kMaxPayloadDepth) + " levels");
    }
    json parsed;
    try {
      parsed = json::parse(text);
    } catch (const json::parse_error& e) {
      return fail(std::string("not valid JSON: ") + e.what());
    }
    auto event = event_from(parsed);
    if (!event) return fail(event.error());
    auto [it, inserted] = first_line.emplace(event->id.str(), line);
    if (!inserted) {
      return fail("event id \"" + event->id.str() + "\" already appears on line " +
                  std::to_string(it->second));
    }
    events.push_back(std::move(*event));
  }
  if (in.bad()) return std::unexpected(LineError{0, "reading the input failed"});
  return events;
}

std::string to_line(const EventView& event) {
  nlohmann::ordered_json line;
  line["id"] = event.id;
  line["type"] = event.type;
  if (auto deep = payload_depth_problem(event.payload)) {
    throw StoreError("event " + std::string(event.id) + " (seq " + std::to_string(event.seq) +
                     ") payload is " + *deep + "; it cannot be exported");
  }
  json payload = json::parse(event.payload, nullptr, false);
  if (payload.is_discarded()) {
    throw StoreError("event " + std::string(event.id) + " (seq " + std::to_string(event.seq) +
                     ") has a payload that is not valid JSON");
  }
  line["payload"] = std::move(payload);
  auto nullable = [](const std::optional<std::string_view>& v) -> nlohmann::ordered_json {
    if (!v) return nullptr;
    return std::string(*v);
  };
  line["actor"] = nullable(event.actor);
  line["frame_id"] = nullable(event.frame_id);
  line["caused_by"] = nullable(event.caused_by);
  line["timestamp"] = event.timestamp;
  // The store keeps its text fields valid UTF-8 (store/event.h), but a store
  // written before that rule may not have: such bytes are written as U+FFFD
  // rather than failing the export.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace forktrial::import::jsonl
