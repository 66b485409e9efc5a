#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), used to prove knowledge of the job secret when a
// connection opens. Self-contained so the engine needs no crypto library.
//
// Thread-safety: the free functions are pure; a Sha256 object is used by one thread at a time.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);

  uint32_t state_[8];
  uint8_t block_[64];
  size_t blockFill_ = 0;
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t bytes);
Sha256Digest hmacSha256(const void* key, size_t keyBytes, const void* data, size_t bytes);
Sha256Digest hmacSha256(const std::string& key, const std::string& data);

// Comparison whose running time does not depend on where the inputs differ.
bool constantTimeEqual(const void* a, const void* b, size_t bytes);

std::string toHex(const uint8_t* data, size_t bytes);
inline std::string toHex(const Sha256Digest& d) { return toHex(d.data(), d.size()); }

}  // namespace hora
