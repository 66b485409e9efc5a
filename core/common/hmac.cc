#include "core/common/hmac.h"

#include <algorithm>
#include <cstring>

namespace hora {
namespace {

// First 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t loadBigEndian(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

inline void storeBigEndian(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}

constexpr size_t kBlockBytes = 64;

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = loadBigEndian(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + sum1 + choose + kRound[i] + w[i];
    uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t bytes) {
  auto* p = static_cast<const uint8_t*>(data);
  totalBytes_ += bytes;
  if (blockFill_ > 0) {
    size_t take = std::min(bytes, kBlockBytes - blockFill_);
    std::memcpy(block_ + blockFill_, p, take);
    blockFill_ += take;
    p += take;
    bytes -= take;
    if (blockFill_ < kBlockBytes) return;
    compress(block_);
    blockFill_ = 0;
  }
  for (; bytes >= kBlockBytes; p += kBlockBytes, bytes -= kBlockBytes) compress(p);
  std::memcpy(block_, p, bytes);
  blockFill_ = bytes;
}

Sha256Digest Sha256::finish() {
  // Padding: one 1 bit, zeros up to 56 mod 64, then the message length in bits (big endian).
  uint64_t bits = totalBytes_ * 8;
  uint8_t tail[kBlockBytes * 2] = {0x80};
  size_t padBytes = (blockFill_ < 56 ? 56 : 120) - blockFill_;
  for (int i = 0; i < 8; ++i) tail[padBytes + i] = uint8_t(bits >> (56 - 8 * i));
  update(tail, padBytes + 8);
  Sha256Digest out;
  for (int i = 0; i < 8; ++i) storeBigEndian(out.data() + 4 * i, state_[i]);
  return out;
}

Sha256Digest sha256(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.finish();
}

Sha256Digest hmacSha256(const void* key, size_t keyBytes, const void* data, size_t bytes) {
  // Keys longer than a block are hashed first; shorter ones are zero-padded to a block.
  uint8_t blockKey[kBlockBytes] = {};
  if (keyBytes > kBlockBytes) {
    Sha256Digest k = sha256(key, keyBytes);
    std::memcpy(blockKey, k.data(), k.size());
  } else if (keyBytes > 0) {
    std::memcpy(blockKey, key, keyBytes);
  }
  uint8_t pad[kBlockBytes];
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = blockKey[i] ^ 0x36;
  Sha256 inner;
  inner.update(pad, kBlockBytes);
  inner.update(data, bytes);
  Sha256Digest innerDigest = inner.finish();
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = blockKey[i] ^ 0x5c;
  Sha256 outer;
  outer.update(pad, kBlockBytes);
  outer.update(innerDigest.data(), innerDigest.size());
  return outer.finish();
}

Sha256Digest hmacSha256(const std::string& key, const std::string& data) {
  return hmacSha256(key.data(), key.size(), data.data(), data.size());
}

bool constantTimeEqual(const void* a, const void* b, size_t bytes) {
  auto* x = static_cast<const volatile uint8_t*>(a);
  auto* y = static_cast<const volatile uint8_t*>(b);
  uint8_t diff = 0;
  for (size_t i = 0; i < bytes; ++i) diff |= uint8_t(x[i] ^ y[i]);
  return diff == 0;
}

std::string toHex(const uint8_t* data, size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(bytes * 2, '0');
  for (size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

}  // namespace hora
