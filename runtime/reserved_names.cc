#include "runtime/reserved_names.h"

#include "base/text.h"
#include "runtime/graph.h"

namespace forktrial::runtime {

bool is_runtime_type(std::string_view type) {
  return schema::is_runtime_record_type(type) || Graph::changes_state(type);
}

std::optional<std::string> reserved_type(std::string_view type) {
  const std::string named = "event type " + quoted_excerpt(type);
  if (auto invisible = invisible_problem(type)) {
    return named + " " + *invisible + "; a type is a name, and must print as the name it is";
  }
  if (is_parent_type(type)) {
    return named +
           " is reserved: types starting with \"trial.\" are written only by the trial's "
           "parent process";
  }
  if (is_forktrial_type(type)) {
    return named + " is reserved: types starting with \"forktrial.\" are written only by forktrial";
  }
  if (is_runtime_type(type)) {
    return named +
           " is written only by the runtime (runtime.*, behavior.*, pack.loaded and the graph's "
           "types; change the graph through the graph methods)";
  }
  return std::nullopt;
}

std::optional<std::string> reserved_actor(std::string_view actor, std::string_view pack,
                                          bool scenario,
                                          const std::function<bool(std::string_view)>& is_pack) {
  if (auto invisible = invisible_problem(actor)) {
    return "actor " + quoted_excerpt(actor) + " " + *invisible +
           "; an actor is a name, and must print as the name it is";
  }
  const std::string named = "actor " + quoted_excerpt(actor) + " is reserved: ";
  if (actor == kRuntimeActor) {
    return named +
           "it names the runtime, which writes pack.loaded, behavior.failed and "
           "runtime.* events";
  }
  if (actor == kScenarioActor && !scenario) {
    return named + "it names the scenario of the trial, and only the scenario may use it";
  }
  if (actor == kSystemActor && !scenario) {
    return named + "it writes the scenario's graph changes, and only the scenario may use it";
  }
  if (is_forktrial_actor(actor)) {
    return named + "actors starting with \"forktrial\" name forktrial itself";
  }
  if (const auto slash = actor.find('/'); slash != std::string_view::npos) {
    const std::string_view owner = actor.substr(0, slash);
    if (owner != pack) {
      const std::string named_pack = "pack " + quoted_excerpt(owner);
      return named + "an actor \"<pack>/<behavior>\" names a behavior of " + named_pack +
             ", and only " + named_pack + " may use it";
    }
  }
  // Behaviors act as "<pack>.<behavior>" (activegraph's canonical name).
  if (const auto dot = actor.find('.'); dot != std::string_view::npos && is_pack) {
    const std::string_view owner = actor.substr(0, dot);
    if (owner != pack && is_pack(owner)) {
      const std::string named_pack = "pack " + quoted_excerpt(owner);
      return named + "an actor \"<pack>.<behavior>\" names a behavior of " + named_pack +
             ", and only " + named_pack + " may use it";
    }
  }
  return std::nullopt;
}

}  // namespace forktrial::runtime
