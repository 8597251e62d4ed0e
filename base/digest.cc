#include "base/digest.h"

// SHA-256 through OpenSSL's one-algorithm interface rather than EVP: the same
// assembly (SHA-NI where the CPU has it), without EVP's first-use set-up
// (configuration file, provider, algorithm name tables), which every trial
// child would pay again at start. OpenSSL 3 marks the interface deprecated
// in favour of EVP; it is still built and supported.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <stdexcept>

namespace forktrial {
namespace {

constexpr char kHex[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> Digest::describe_pin_problem(std::string_view text) {
  if (!text.starts_with(kPrefix)) {
    return "it must start with \"sha256:\"";
  }
  std::string_view hex = text.substr(kPrefix.size());
  if (hex.size() != 2 * kSize) {
    return "it must have exactly 64 hex digits after \"sha256:\", found " +
           std::to_string(hex.size());
  }
  for (char c : hex) {
    if (hex_value(c) < 0) {
      if (c >= 'A' && c <= 'F') return "hex digits must be lowercase";
      return "it contains a character that is not a hex digit";
    }
  }
  return std::nullopt;
}

std::optional<Digest> Digest::parse(std::string_view text) {
  if (describe_pin_problem(text)) return std::nullopt;
  std::string_view hex = text.substr(kPrefix.size());
  std::array<std::uint8_t, kSize> bytes{};
  for (std::size_t i = 0; i < kSize; ++i) {
    bytes[i] = static_cast<std::uint8_t>(hex_value(hex[2 * i]) * 16 + hex_value(hex[2 * i + 1]));
  }
  return Digest(bytes);
}

std::string Digest::hex() const {
  std::string out(2 * kSize, '0');
  for (std::size_t i = 0; i < kSize; ++i) {
    out[2 * i] = kHex[bytes_[i] >> 4];
    out[2 * i + 1] = kHex[bytes_[i] & 0x0f];
  }
  return out;
}

std::string Digest::str() const {
  return std::string(kPrefix) + hex();
}

struct Sha256::State {
  SHA256_CTX ctx{};
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  if (SHA256_Init(&state_->ctx) != 1) {
    throw std::runtime_error("OpenSSL: cannot initialise a SHA-256 context");
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
  if (size == 0) return;
  if (SHA256_Update(&state_->ctx, data, size) != 1) {
    throw std::runtime_error("OpenSSL: SHA256_Update failed");
  }
}

Digest Sha256::finish() {
  std::array<std::uint8_t, Digest::kSize> bytes{};
  static_assert(Digest::kSize == SHA256_DIGEST_LENGTH);
  if (SHA256_Final(bytes.data(), &state_->ctx) != 1) {
    throw std::runtime_error("OpenSSL: SHA256_Final failed");
  }
  return Digest(bytes);
}

Digest Sha256::of(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.finish();
}

}  // namespace forktrial
