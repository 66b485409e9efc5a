#include "core/coordinator/cache_hits.h"

#include <algorithm>

#include "core/common/bits.h"

namespace hora {

CacheHits::CacheHits(size_t slots, int worldSize)
    : words_((static_cast<size_t>(worldSize) + 63) / 64),
      bits_(slots * words_, 0),
      counts_(slots, 0) {}

std::vector<int> CacheHits::ranks(int slot) const {
  std::vector<int> out;
  out.reserve(counts_[slot]);
  forEachSetBit(bits_.data() + static_cast<size_t>(slot) * words_, words_,
                [&](size_t rank) { out.push_back(static_cast<int>(rank)); });
  return out;
}

void CacheHits::clear(int slot) {
  if (counts_[slot] == 0) return;
  auto row = bits_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(slot) * words_);
  std::fill(row, row + static_cast<std::ptrdiff_t>(words_), 0);
  counts_[slot] = 0;
}

}  // namespace hora
