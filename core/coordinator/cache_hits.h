#pragma once
// CacheHits: which ranks reported each response-cache slot ready by bit, for the coordinator.
// One row of worldSize bits per slot and a count per slot: recording a report, reading a slot's
// count and forgetting a slot cost O(1), O(1) and O(worldSize / 64), whatever the number of ranks
// that reported, so that rank 0's work per cached tensor does not grow with the job beyond the
// one report each rank sends. Listing a slot's ranks (stall and deadlock reports) scans its row.
//
// Memory: capacity x worldSize bits (128 KiB for 1,024 slots at 1,024 ranks), allocated up front.
// Not thread-safe: the coordinator's thread owns it.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hora {

class CacheHits {
 public:
  CacheHits(size_t slots, int worldSize);

  // Records that `rank` reported `slot`; false (and nothing changes) when it already had.
  bool add(int slot, int rank) {
    uint64_t& word = bits_[static_cast<size_t>(slot) * words_ + static_cast<size_t>(rank) / 64];
    const uint64_t bit = uint64_t(1) << (rank % 64);
    if (word & bit) return false;
    word |= bit;
    ++counts_[slot];
    return true;
  }
  int count(int slot) const { return static_cast<int>(counts_[slot]); }
  bool has(int slot, int rank) const {
    return (bits_[static_cast<size_t>(slot) * words_ + static_cast<size_t>(rank) / 64] >>
            (rank % 64)) &
           1;
  }
  // The slot's row: bit r of word r / 64 set when rank r reported it.
  const uint64_t* row(int slot) const { return bits_.data() + static_cast<size_t>(slot) * words_; }
  size_t words() const { return words_; }
  // The ranks that reported `slot`, ascending.
  std::vector<int> ranks(int slot) const;
  // Forgets every report of `slot`.
  void clear(int slot);
  size_t bytes() const {
    return bits_.capacity() * sizeof(uint64_t) + counts_.capacity() * sizeof(uint32_t);
  }

 private:
  size_t words_;  // per slot
  std::vector<uint64_t> bits_;
  std::vector<uint32_t> counts_;
};

}  // namespace hora
