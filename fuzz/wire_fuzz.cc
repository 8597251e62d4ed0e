// The wire decoder (schema/wire_codec.h): whatever a peer sends, decode()
// returns a Frame or a WireError, never crashes. A frame it accepts is read
// whole (Cap'n Proto's text form visits every field, as handlers may), is
// copied into a new message and encoded again, and that frame decodes to the
// same arm.
#include <capnp/message.h>
#include <kj/string.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/check.h"
#include "schema/wire_codec.h"

namespace wire = forktrial::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // A small limit, so that the refusal of a frame too large is reached too.
  auto frame = wire::decode(bytes, 1 << 16);
  if (!frame) {
    FUZZ_CHECK(!frame.error().message.empty());
    FUZZ_CHECK(bytes.size() > (1 << 16) ||
               frame.error().code != forktrial::ErrorCode::resource_exhausted);
    return 0;
  }
  const auto envelope = frame->envelope();
  FUZZ_CHECK(envelope.getVersion() == forktrial::schema::wire::K_PROTOCOL_VERSION);
  try {
    (void)kj::str(envelope);
    capnp::MallocMessageBuilder copy;
    copy.setRoot(envelope);
    const std::string again = wire::encode(copy);
    auto redecoded = wire::decode(again);
    FUZZ_CHECK(redecoded.has_value());
    FUZZ_CHECK(redecoded->envelope().which() == envelope.which());
    FUZZ_CHECK(redecoded->envelope().getRequestId() == envelope.getRequestId());
  } catch (const kj::Exception&) {
    // A pointer that points outside the message is found when it is followed:
    // the coordinator answers that with malformed (server.cc).
  }
  return 0;
}
