// activegraph's JSON Lines events (import/jsonl.h). Each input is parsed as a
// whole stream; a stream that parses is written back as JSON Lines (to_line,
// what `forktrial run export` prints) and parsed again, which must give the
// same events (a payload may be spelled differently, not differ in value:
// it is compared after one more round).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/check.h"
#include "import/jsonl.h"
#include "store/event.h"

namespace jsonl = forktrial::import::jsonl;
using forktrial::store::NewEvent;

namespace {

std::string lines_of(const std::vector<NewEvent>& events) {
  std::string out;
  for (const NewEvent& event : events) {
    out += jsonl::to_line(forktrial::store::view_of(event));
    out += '\n';
  }
  return out;
}

bool same_but_payload(const NewEvent& a, const NewEvent& b) {
  return a.id == b.id && a.type == b.type && a.timestamp == b.timestamp && a.actor == b.actor &&
         a.frame_id == b.frame_id && a.caused_by == b.caused_by;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  auto events = jsonl::parse_events(in);
  if (!events) {
    FUZZ_CHECK(events.error().message.starts_with("line "));
    return 0;
  }
  const std::string written = lines_of(*events);
  std::istringstream again(written);
  auto reread = jsonl::parse_events(again);
  FUZZ_CHECK(reread.has_value());
  FUZZ_CHECK(reread->size() == events->size());
  for (std::size_t i = 0; i < events->size(); ++i) {
    FUZZ_CHECK(same_but_payload((*events)[i], (*reread)[i]));
  }
  // Written once, the payloads are in to_line's spelling: a second round
  // writes the same bytes.
  FUZZ_CHECK(lines_of(*reread) == written);
  return 0;
}
