#include "store/event.h"

#include <utility>

#include "base/text.h"
#include "store/payload.h"

namespace forktrial::store {
namespace {

// Why the text field `name` holding `value` breaks the text rule;
// `required` fields must not be empty.
std::optional<std::string> text_field_problem(std::string_view name, std::string_view value,
                                              std::size_t limit, bool required) {
  if (required && value.empty()) return std::string(name) + " is empty";
  return named_text_problem(name, value, limit);
}

}  // namespace

Event EventView::to_event() const {
  Event e;
  e.id = EventId(std::string(id));
  e.type = std::string(type);
  e.payload = std::string(payload);
  e.timestamp = std::string(timestamp);
  if (actor) e.actor = std::string(*actor);
  if (frame_id) e.frame_id = std::string(*frame_id);
  if (caused_by) e.caused_by = EventId(std::string(*caused_by));
  e.seq = seq;
  return e;
}

EventView view_of(const NewEvent& event) {
  EventView view;
  view.id = event.id.str();
  view.type = event.type;
  view.payload = event.payload;
  view.timestamp = event.timestamp;
  if (event.actor) view.actor = *event.actor;
  if (event.frame_id) view.frame_id = *event.frame_id;
  if (event.caused_by) view.caused_by = event.caused_by->str();
  return view;
}

std::optional<TextProblem> event_text_problem(const NewEvent& e) {
  struct Field {
    const char* name;
    const std::string* value;  // null: the field is absent
    std::size_t limit;
    bool required;
  };
  const Field fields[] = {
      {"id", &e.id.str(), kMaxIdBytes, true},
      {"type", &e.type, kMaxEventTextBytes, true},
      {"actor", e.actor ? &*e.actor : nullptr, kMaxEventTextBytes, false},
      {"frame_id", e.frame_id ? &*e.frame_id : nullptr, kMaxEventTextBytes, false},
      {"caused_by", e.caused_by ? &e.caused_by->str() : nullptr, kMaxIdBytes, false},
      {"timestamp", &e.timestamp, kMaxEventTextBytes, true},
  };
  for (const Field& field : fields) {
    if (field.value == nullptr) continue;
    const std::string named = "field \"" + std::string(field.name) + "\"";
    if (auto problem = text_field_problem(named, *field.value, field.limit, field.required)) {
      return TextProblem{field.name, std::move(*problem)};
    }
  }
  // A type or an actor is a name that readers compare (the reserved ones
  // above all): one that prints like another must be the other.
  for (const Field& field : {fields[1], fields[2]}) {
    if (field.value == nullptr) continue;
    if (auto invisible = invisible_problem(*field.value)) {
      return TextProblem{field.name, "field \"" + std::string(field.name) + "\" " +
                                         quoted_excerpt(*field.value) + " " + *invisible +
                                         "; a type or an actor is a name, and must print as "
                                         "the name it is"};
    }
  }
  return std::nullopt;
}

std::optional<TextProblem> run_text_problem(const NewRun& run) {
  if (run.id) {
    if (auto problem = text_field_problem("run id", run.id->str(), kMaxIdBytes, true)) {
      return TextProblem{"id", std::move(*problem)};
    }
  }
  if (auto problem = text_field_problem("label", run.label, kMaxEventTextBytes, false)) {
    return TextProblem{"label", std::move(*problem)};
  }
  if (run.created_at) {
    if (auto problem =
            text_field_problem("created_at", *run.created_at, kMaxEventTextBytes, false)) {
      return TextProblem{"created_at", std::move(*problem)};
    }
  }
  if (run.goal) {
    // A goal is prose a user wrote, often over several lines.
    if (auto problem =
            named_text_problem("goal", *run.goal, kMaxRunGoalBytes, LineBreaks::allowed)) {
      return TextProblem{"goal", std::move(*problem)};
    }
  }
  if (run.frame_id) {
    if (auto problem = text_field_problem("frame_id", *run.frame_id, kMaxEventTextBytes, false)) {
      return TextProblem{"frame_id", std::move(*problem)};
    }
  }
  if (auto problem = text_field_problem("owner", run.owner, kMaxIdBytes, false)) {
    return TextProblem{"owner", std::move(*problem)};
  }
  return std::nullopt;
}

std::optional<std::string> event_problem(const NewEvent& e) {
  if (e.payload.size() > kMaxPayloadBytes) {
    return "event " + e.id.str() + " payload is " + std::to_string(e.payload.size()) +
           " bytes; an event holds at most " + std::to_string(kMaxPayloadBytes);
  }
  if (auto problem = event_text_problem(e)) {
    return problem->field == "id" ? problem->message
                                  : "event " + e.id.str() + ": " + problem->message;
  }
  if (auto deep = payload_depth_problem(e.payload)) {
    return "event " + e.id.str() + " payload is " + *deep;
  }
  return std::nullopt;
}

std::size_t event_text_bytes(const NewEvent& event) {
  const auto optional_size = [](const auto& text) { return text ? text->size() : 0; };
  return event.id.str().size() + event.type.size() + event.payload.size() + event.timestamp.size() +
         optional_size(event.actor) + optional_size(event.frame_id) +
         (event.caused_by ? event.caused_by->str().size() : 0);
}

}  // namespace forktrial::store
