// Rule 3 of the hash walk (docs/pack-format.md), shared by the walk and the
// pack archive's reader, so an archive refuses exactly the names the walk
// refuses. Private to the pack component. Pure and thread-safe.
#pragma once

#include <optional>
#include <string>

#include "pack/bundle_hash.h"

namespace forktrial::pack {

// The non_utf8_path or non_nfc_path violation of relative path `path`, with
// the fix in its detail; nullopt when `path` is valid UTF-8 in NFC.
std::optional<WalkViolation> check_path_text(const std::string& path);

}  // namespace forktrial::pack
