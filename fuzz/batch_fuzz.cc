// Batch files (coordinator/batch_file.h), TOML and JSON Lines: parse_batch on
// each input as the file <root>/a/b/c/batches/batch, beside examples/packs
// and examples/candidates copied to <root>/a/b/c (so that
// "../packs/chat_echo" resolves, is walked, hashed and pinned as in a real
// batch). Properties: a refusal lists at least
// one problem; an accepted batch has one candidate name per trial, every
// pack root absolute and pinned, and every pack listed once.
//
// parse_batch walks whatever directory a batch names. So that a mutation
// cannot send it over the whole file system, inputs that could name a
// directory outside <root> are skipped: an absolute path (a '/' that does
// not follow a name character), more ".." than the batch's directory is
// deep in <root> (four), or an escape that could spell either (\u, \U, \x).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string_view>

#include "coordinator/batch_file.h"
#include "fuzz/check.h"
#include "fuzz/scratch.h"

namespace fs = std::filesystem;

namespace {

bool stays_inside(std::string_view text) {
  std::size_t parents = 0;
  for (std::size_t at = text.find(".."); at != std::string_view::npos;
       at = text.find("..", at + 2)) {
    if (++parents > 4) return false;
  }
  for (std::string_view escape : {"\\u", "\\U", "\\x"}) {
    if (text.find(escape) != std::string_view::npos) return false;
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '/') continue;
    const char before = i == 0 ? '\0' : text[i - 1];
    const bool name_char = (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') ||
                           (before >= '0' && before <= '9') || before == '.' || before == '_' ||
                           before == '-';
    if (!name_char) return false;
  }
  return true;
}

const fs::path& batch_file() {
  static const fs::path file = [] {
    const fs::path root = forktrial::fuzz::scratch_dir() / "a/b/c";
    fs::create_directories(root / "batches");
    for (const char* folder : {"packs", "candidates"}) {
      fs::copy(fs::path(FORKTRIAL_SOURCE_DIR) / "examples" / folder, root / folder,
               fs::copy_options::recursive);
    }
    return root / "batches" / "batch";
  }();
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!stays_inside(text)) return 0;
  auto batch = forktrial::coordinator::parse_batch(text, batch_file());
  if (!batch) {
    FUZZ_CHECK(!batch.error().list.empty());
    for (const auto& problem : batch.error().list) FUZZ_CHECK(!problem.empty());
    return 0;
  }
  FUZZ_CHECK(batch->candidates.size() == batch->trials.size());
  std::set<std::string> roots;
  for (const auto& pack : batch->packs) {
    FUZZ_CHECK(fs::path(pack.root_dir).is_absolute());
    FUZZ_CHECK(roots.insert(pack.root_dir).second);
  }
  for (const auto& trial : batch->trials) {
    FUZZ_CHECK(trial.candidate.expected_bundle_hash.has_value());
    FUZZ_CHECK(roots.contains(trial.candidate.root_dir));
  }
  return 0;
}
