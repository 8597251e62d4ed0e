// SHA-256 digests and a streaming hasher.
//
// `Digest` is a value type holding the 32 raw bytes of a SHA-256 digest. Its
// text form is "sha256:" followed by 64 lowercase hex digits; that is the only
// form forktrial accepts or prints (pins, blob keys, manifests).
//
// `Sha256` feeds bytes incrementally through OpenSSL's EVP interface, which
// uses the CPU's SHA extensions when present. It is movable, not copyable, and
// not thread-safe: one hasher belongs to one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace forktrial {

class Digest {
 public:
  static constexpr std::size_t kSize = 32;
  static constexpr std::string_view kPrefix = "sha256:";

  Digest() = default;
  explicit Digest(const std::array<std::uint8_t, kSize>& bytes) : bytes_(bytes) {}

  // Parses "sha256:<64 lowercase hex>". Returns nullopt for anything else
  // (missing prefix, uppercase hex, wrong length); `describe_pin_problem`
  // says which.
  static std::optional<Digest> parse(std::string_view text);
  // Why `text` is not a well-formed digest, or nullopt when it is.
  static std::optional<std::string> describe_pin_problem(std::string_view text);

  std::string str() const;  // "sha256:" + hex
  std::string hex() const;  // 64 lowercase hex digits
  const std::array<std::uint8_t, kSize>& bytes() const { return bytes_; }

  friend bool operator==(const Digest&, const Digest&) = default;
  friend auto operator<=>(const Digest&, const Digest&) = default;

 private:
  std::array<std::uint8_t, kSize> bytes_{};
};

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  void update(std::span<const std::uint8_t> bytes) { update(bytes.data(), bytes.size()); }
  // Ends the computation; the hasher must not be used afterwards.
  Digest finish();

  // One-shot convenience for small inputs.
  static Digest of(std::string_view bytes);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace forktrial
