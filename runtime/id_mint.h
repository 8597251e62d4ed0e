// The ids the runtime mints, by activegraph's scheme (activegraph/core/ids.py):
//
//   objects    "<type>#N"   ONE counter over all types (task#1, task#2, note#3)
//   relations  "rel_NNN"    (zero-padded to at least three digits)
//   patches    "patch_NNN"
//   events     "evt_NNN"    (store::numbered_event_id)
//
// Each counter continues after the largest number the history holds, the way
// activegraph's reseed_from_events does it: an event id of the form
// "<letters>_<digits>" counts for events; the object id inside an
// object.created payload ("payload.object.id", "<anything but #>#<digits>")
// for objects; "payload.relation.id" of relation.created for relations;
// "payload.patch.id" of patch.proposed and patch.applied, and
// "payload.patch_id" of patch.rejected, for patches. Removed items count too,
// so no number is minted twice; counters never go backwards.
//
// A counter that would pass 2^64 - 1 is exhausted (an error value), never
// wrapped. Thread-compatible.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace forktrial::runtime {

class IdMint {
 public:
  // Advances the counters past what one event of the history holds.
  void note(std::string_view event_id, std::string_view event_type,
            const nlohmann::ordered_json& payload);

  std::expected<std::string, Status> next_object(std::string_view type);
  std::expected<std::string, Status> next_relation();
  std::expected<std::string, Status> next_patch();
  // The number of the next event id ("evt_" + it).
  std::expected<std::uint64_t, Status> next_event_number();

  std::uint64_t objects() const { return object_; }
  std::uint64_t relations() const { return relation_; }
  std::uint64_t patches() const { return patch_; }
  std::uint64_t events() const { return event_; }

 private:
  std::uint64_t object_ = 0;
  std::uint64_t relation_ = 0;
  std::uint64_t patch_ = 0;
  std::uint64_t event_ = 0;
};

// The number of an id "<letters>_<digits>" ("evt_012" -> 12), nullopt for any
// other id or a number past 2^64 - 1.
std::optional<std::uint64_t> suffix_number(std::string_view id);

}  // namespace forktrial::runtime
