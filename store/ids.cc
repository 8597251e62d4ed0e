#include "store/ids.h"

#include <cstdio>

namespace forktrial::store {

EventId numbered_event_id(std::uint64_t n) {
  char text[32];
  std::snprintf(text, sizeof text, "evt_%03llu", static_cast<unsigned long long>(n));
  return EventId(text);
}

}  // namespace forktrial::store
