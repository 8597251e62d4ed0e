// The coordinator's handling of peers' messages (coordinator/server.h
// CoordinatorCore: run_coordinator's code, fed without a socket), with its
// scheduler and a store of its own for each input. An input is a sequence of
// frames from up to four peers:
//
//   repeated { head u8 ‖ length u16 little-endian ‖ length bytes: one frame }
//
// head & 3 picks the peer's routing id; head >> 2 is how many seconds pass
// before the frame arrives (enough to lapse leases and lose workers).
// Every frame is answered or refused without a crash, and every reply the
// coordinator sends is a frame its peers can decode.
//
// Each input starts from a copy of one store made at start-up, which holds
// the run run_chat (examples/runs/chat.jsonl) and the archive of the pack
// examples/packs/chat_echo, so that a submission can be accepted, leased,
// reported and reconciled (the seeds of fuzz/seeds.cc do all of it).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>

#include "coordinator/server.h"
#include "fuzz/check.h"
#include "fuzz/scratch.h"
#include "import/jsonl.h"
#include "pack/bundle_archive.h"
#include "schema/wire_codec.h"
#include "store/event_store.h"

namespace coordinator = forktrial::coordinator;
namespace wire = forktrial::wire;

namespace {

constexpr std::size_t kMaxFrames = 64;

const std::filesystem::path& template_store() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path source(FORKTRIAL_SOURCE_DIR);
    auto path = forktrial::fuzz::scratch_dir() / "template";
    forktrial::store::EventStore store(path);
    std::ifstream history(source / "examples/runs/chat.jsonl");
    auto events = forktrial::import::jsonl::parse_events(history);
    FUZZ_CHECK(events.has_value());
    FUZZ_CHECK(
        store.import_run({.id = forktrial::store::RunId("run_chat"), .label = "chat"}, *events));
    auto archive = forktrial::pack::archive_pack(source / "examples/packs/chat_echo");
    FUZZ_CHECK(archive.has_value());
    store.put_blob(std::as_bytes(std::span(archive->bytes.data(), archive->bytes.size())));
    return path;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t inputs = 0;
  // FORKTRIAL_FUZZ_VERBOSE=1 prints every reply (with -runs=0 INPUT: what an
  // input reaches).
  static const bool verbose = std::getenv("FORKTRIAL_FUZZ_VERBOSE") != nullptr;
  const std::filesystem::path store =
      forktrial::fuzz::scratch_dir() / ("coordinator-" + std::to_string(inputs++));
  coordinator::ServerConfig config;
  std::filesystem::copy(template_store(), store);
  config.store = store;
  config.max_frame_bytes = 1 << 16;
  config.max_queued = 1000;
  const forktrial::Log quiet = [](forktrial::LogLevel, const std::string&) {};
  {
    coordinator::CoordinatorCore core(config, quiet);
    coordinator::Instant now{std::chrono::milliseconds(1'700'000'000'000)};
    std::size_t at = 0;
    for (std::size_t frames = 0; frames < kMaxFrames && at + 3 <= size; ++frames) {
      const std::uint8_t head = data[at];
      const std::size_t length = data[at + 1] | (std::size_t{data[at + 2]} << 8);
      at += 3;
      const std::size_t taken = std::min(length, size - at);
      const std::string_view frame(reinterpret_cast<const char*>(data + at), taken);
      at += taken;
      now += std::chrono::seconds(head >> 2);
      const std::string route = "peer" + std::to_string(head & 3);
      for (const auto& [to, reply] : core.turn(route, frame, now)) {
        FUZZ_CHECK(!to.empty());
        auto decoded = wire::decode(reply);
        FUZZ_CHECK(decoded.has_value());
        if (verbose) {
          const auto envelope = decoded->envelope();
          std::fprintf(stderr, "%s <- arm %u%s%s\n", to.c_str(),
                       static_cast<unsigned>(envelope.which()), envelope.isError() ? ": " : "",
                       envelope.isError() ? envelope.getError().getMessage().cStr() : "");
        }
      }
    }
  }
  std::filesystem::remove_all(store);
  return 0;
}
