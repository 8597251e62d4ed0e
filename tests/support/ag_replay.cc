#include "tests/support/ag_replay.h"

#include <catch2/catch.hpp>

namespace forktrial::testing {

nlohmann::ordered_json ag_replayed(const TempDir& dir, const std::string& jsonl) {
  const auto file = dir.write("ag-replay-input.jsonl", jsonl);
  const auto result =
      run_command({"python3", FORKTRIAL_SOURCE_DIR "/tests/runtime/ag_replayer.py", file.string()});
  INFO("replayer stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return nlohmann::ordered_json::parse(result.out);
}

void require_same_state(const nlohmann::ordered_json& ours, const nlohmann::ordered_json& theirs) {
  for (const char* kind : {"objects", "relations", "patches"}) {
    INFO(kind);
    REQUIRE(ours[kind].size() == theirs[kind].size());
    for (std::size_t i = 0; i < ours[kind].size(); ++i) {
      INFO(ours[kind][i].dump());
      REQUIRE(ours[kind][i] == theirs[kind][i]);
    }
  }
}

}  // namespace forktrial::testing
