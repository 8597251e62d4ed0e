#include "base/digest.h"

#include <openssl/evp.h>

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
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot initialise a SHA-256 context");
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
  if (size == 0) return;
  if (EVP_DigestUpdate(state_->ctx, data, size) != 1) {
    throw std::runtime_error("OpenSSL: EVP_DigestUpdate failed");
  }
}

Digest Sha256::finish() {
  std::array<std::uint8_t, Digest::kSize> bytes{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(state_->ctx, bytes.data(), &length) != 1 || length != Digest::kSize) {
    throw std::runtime_error("OpenSSL: EVP_DigestFinal_ex failed");
  }
  return Digest(bytes);
}

Digest Sha256::of(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.finish();
}

}  // namespace forktrial
