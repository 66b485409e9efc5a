#pragma once
// Bit vectors stored as 64-bit words: bit i is bit i % 64 of word i / 64 (the cache bits of
// negotiation messages, the rounds of the agreement board).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hora {

inline bool bitSet(const uint64_t* words, size_t i) { return (words[i / 64] >> (i % 64)) & 1u; }
inline void setBit(uint64_t* words, size_t i) { words[i / 64] |= uint64_t{1} << (i % 64); }
inline void clearBit(uint64_t* words, size_t i) { words[i / 64] &= ~(uint64_t{1} << (i % 64)); }
// Grows the vector to hold bit i.
inline void setBit(std::vector<uint64_t>& words, size_t i) {
  if (words.size() <= i / 64) words.resize(i / 64 + 1, 0);
  setBit(words.data(), i);
}

// Calls f(i) for every set bit of words[0, count), in ascending order. Each word is read once,
// before its bits are visited, so f may clear bits of the word it is in.
template <typename F>
void forEachSetBit(const uint64_t* words, size_t count, F&& f) {
  for (size_t w = 0; w < count; ++w) {
    for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
      f(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
    }
  }
}

}  // namespace hora
