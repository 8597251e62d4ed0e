#include "import/jsonl.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/text.h"
#include "base/timestamp.h"
#include "store/event_store.h"
#include "store/json_text.h"
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
namespace json_text = store::json_text;

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

// `payload_text` is the payload member's bytes as they appear on the line.
std::expected<NewEvent, std::string> event_from(const json& object, std::string_view payload_text) {
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
  // The recorded bytes, not a re-serialization: key order, spacing and
  // numbers (integers of any width included) stay as they were written.
  if (auto problem = json_text::payload_problem(payload_text)) {
    return std::unexpected("field \"payload\" " + *problem);
  }
  event.payload = std::string(payload_text);
  auto timestamp = required_string(object, "timestamp");
  if (!timestamp) return std::unexpected(timestamp.error());
  // The runtime's rule: a run that imports is a run every trial can read.
  if (auto parsed = parse_timestamp(*timestamp); !parsed) {
    return std::unexpected("field \"timestamp\": " + parsed.error().message);
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
    // The line's members as text: the payload is kept as its own bytes, and
    // Python's NaN/Infinity, which no JSON parser here reads, can be named.
    auto members = json_text::object_members(text);
    std::string_view payload_text;
    if (members) {
      std::optional<std::string> id;
      for (const auto& [key, value] : *members) {
        if (key == "payload") payload_text = value;
        if (key == "id" && value.starts_with('"')) {
          if (json parsed_id = json::parse(value, nullptr, false); parsed_id.is_string()) {
            id = parsed_id.get<std::string>();
          }
        }
      }
      if (auto bad = json_text::first_non_finite(payload_text, "payload")) {
        std::string event = "event";
        if (id &&
            !event_text_problem(NewEvent{.id = EventId(*id), .type = "t", .timestamp = "t"})) {
          event += " " + *id;
        }
        return fail(event + ": field \"payload\" holds the value " + bad->second + " at " +
                    bad->first +
                    ", which is not JSON (Python writes it for a float that is not finite); "
                    "forktrial refuses it so that every trial can read the run");
      }
    }
    json parsed;
    try {
      parsed = json::parse(text);
    } catch (const json::exception& e) {
      // parse_error, and out_of_range for a number no double holds (1e400).
      return fail(std::string("not valid JSON: ") + e.what());
    }
    if (!members) return fail(members.error().message);
    auto event = event_from(parsed, payload_text);
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
  // Python's json.dumps(event.to_dict()) with its default arguments: the
  // keys in this order, ", " and ": " separators, ASCII only.
  std::string line = "{\"id\": ";
  json_text::append_python_string(line, event.id);
  line += ", \"type\": ";
  json_text::append_python_string(line, event.type);
  line += ", \"payload\": ";
  if (auto deep = payload_depth_problem(event.payload)) {
    throw StoreError("event " + std::string(event.id) + " (seq " + std::to_string(event.seq) +
                     ") payload is " + *deep + "; it cannot be exported");
  }
  // Token by token from the stored bytes, so integers of any width and the
  // spelling of every number are written as recorded.
  if (!json_text::append_python_json(line, event.payload)) {
    throw StoreError("event " + std::string(event.id) + " (seq " + std::to_string(event.seq) +
                     ") has a payload that is not valid JSON");
  }
  auto nullable = [&line](const char* key, const std::optional<std::string_view>& value) {
    line += ", \"";
    line += key;
    line += "\": ";
    if (value) {
      json_text::append_python_string(line, *value);
    } else {
      line += "null";
    }
  };
  nullable("actor", event.actor);
  nullable("frame_id", event.frame_id);
  nullable("caused_by", event.caused_by);
  line += ", \"timestamp\": ";
  // The store keeps its text fields valid UTF-8 (store/event.h), but a store
  // written before that rule may not have: such bytes are written as U+FFFD
  // rather than failing the export.
  json_text::append_python_string(line, event.timestamp);
  line += '}';
  return line;
}

store::Result<store::RunInfo> import_fork(store::EventStore& store, const store::RunId& parent,
                                          const store::EventId& at, const store::NewRun& fork,
                                          std::vector<store::NewEvent> events) {
  using store::Refusal;
  using store::Refused;
  return store.write([&](store::Writer& w) -> store::Result<store::RunInfo> {
    auto parent_run = w.run(parent);
    if (!parent_run) {
      return std::unexpected(Refusal{Refused::unknown_run, "no run " + parent.str()});
    }
    auto fork_point = w.find_event(*parent_run, at);
    if (!fork_point) {
      return std::unexpected(
          Refusal{Refused::unknown_event, "run " + parent.str() + " has no event " + at.str()});
    }
    std::size_t copied = 0;
    std::optional<Refusal> differs;
    w.for_each_event(*parent_run, 1, [&](const store::EventView& inherited) {
      if (inherited.seq > fork_point->seq) return false;
      if (copied == 0 && (events.empty() || events.front().id.str() != inherited.id)) {
        return false;  // the fork's own events only
      }
      const std::string what =
          "event " + std::string(inherited.id) + " (line " + std::to_string(copied + 1) + ")";
      if (copied == events.size()) {
        differs = Refusal{Refused::invalid_input,
                          "the file ends inside the inherited prefix, before " + what +
                              ", so it is not a fork of " + parent.str() + " at " + at.str()};
        return false;
      }
      if (to_line(store::view_of(events[copied])) != to_line(inherited)) {
        differs =
            Refusal{Refused::invalid_input,
                    "the file repeats the history of " + parent.str() + " up to " + at.str() +
                        ", but " + what + " differs from the parent's " +
                        std::string(inherited.id) + " (seq " + std::to_string(inherited.seq) + ")"};
        return false;
      }
      ++copied;
      return true;
    });
    if (differs) return std::unexpected(*differs);
    auto created = w.fork(parent, at, fork);
    if (!created) return created;
    auto own = std::span<const store::NewEvent>(events).subspan(copied);
    auto head = w.append(created->id, created->head, own);
    if (!head) return std::unexpected(head.error());
    created->head = *head;
    return created;
  });
}

}  // namespace forktrial::import::jsonl
