#include "runtime/id_mint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <optional>

namespace forktrial::runtime {
namespace {

using json = nlohmann::ordered_json;

std::optional<std::uint64_t> digits(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return n;
}

// "<anything but #>#<digits>" -> the number.
std::optional<std::uint64_t> object_number(std::string_view id) {
  const auto hash = id.find('#');
  if (hash == 0 || hash == std::string_view::npos) return std::nullopt;
  return digits(id.substr(hash + 1));
}

std::string_view string_at(const json& payload, const char* outer, const char* inner) {
  if (!payload.is_object()) return {};
  const json* value = &payload;
  if (outer != nullptr) {
    const auto it = payload.find(outer);
    if (it == payload.end() || !it->is_object()) return {};
    value = &*it;
  }
  const auto it = value->find(inner);
  if (it == value->end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

void raise_to(std::uint64_t& counter, std::optional<std::uint64_t> seen) {
  if (seen) counter = std::max(counter, *seen);
}

std::expected<std::uint64_t, Status> bump(std::uint64_t& counter, const char* what) {
  if (counter == std::numeric_limits<std::uint64_t>::max()) {
    return failure(ErrorCode::resource_exhausted,
                   std::string("the ") + what + " id counter is exhausted (" +
                       std::to_string(counter) + " is taken); no new " + what + " id can be made");
  }
  return ++counter;
}

std::string padded(const char* prefix, std::uint64_t n) {
  char digits_text[32];
  std::snprintf(digits_text, sizeof digits_text, "%03llu", static_cast<unsigned long long>(n));
  return std::string(prefix) + digits_text;
}

}  // namespace

std::optional<std::uint64_t> suffix_number(std::string_view id) {
  const auto underscore = id.find('_');
  if (underscore == 0 || underscore == std::string_view::npos) return std::nullopt;
  for (char c : id.substr(0, underscore)) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return std::nullopt;
  }
  return digits(id.substr(underscore + 1));
}

void IdMint::note(std::string_view event_id, std::string_view event_type, const json& payload) {
  raise_to(event_, suffix_number(event_id));
  if (event_type == "object.created") {
    raise_to(object_, object_number(string_at(payload, "object", "id")));
  } else if (event_type == "relation.created") {
    raise_to(relation_, suffix_number(string_at(payload, "relation", "id")));
  } else if (event_type == "patch.proposed" || event_type == "patch.applied") {
    raise_to(patch_, suffix_number(string_at(payload, "patch", "id")));
  } else if (event_type == "patch.rejected") {
    raise_to(patch_, suffix_number(string_at(payload, nullptr, "patch_id")));
  }
}

std::expected<std::string, Status> IdMint::next_object(std::string_view type) {
  auto n = bump(object_, "object");
  if (!n) return std::unexpected(n.error());
  return std::string(type) + "#" + std::to_string(*n);
}

std::expected<std::string, Status> IdMint::next_relation() {
  auto n = bump(relation_, "relation");
  if (!n) return std::unexpected(n.error());
  return padded("rel_", *n);
}

std::expected<std::string, Status> IdMint::next_patch() {
  auto n = bump(patch_, "patch");
  if (!n) return std::unexpected(n.error());
  return padded("patch_", *n);
}

std::expected<std::uint64_t, Status> IdMint::next_event_number() {
  return bump(event_, "event");
}

}  // namespace forktrial::runtime
