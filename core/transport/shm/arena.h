#pragma once
// SharedArena: the shared-memory SharedPool (core/transport/shared_pool.h). It sits in the job's
// segment file after the segment's fixed part: one area of areaBytes per rank, in rank order.
// Every rank maps all areas, as a mapping of its own beside the segment's: the segment is
// unmapped when a rank fails, but a tensor in the arena must stay valid, so the arena's mapping
// goes only with the last block allocated from it.
//
// The file keeps the areas as holes until a block is allocated: a block's pages are reserved at
// allocate() (an allocation that cannot get them fails, instead of a SIGBUS on first touch) and
// given back when the block is freed. A rank allocates only from its own area; peers read any
// area at the offsets its owner publishes (window_allreduce.h), checked against the arena's bounds.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "core/transport/shared_pool.h"

namespace hora {
namespace shm {

// The system's page size, and n rounded up to a whole number of pages: the arena's unit, and
// where it starts in the segment's file.
size_t pageBytes();
size_t roundUpToPage(size_t n);

class SharedArena : public SharedPool, public std::enable_shared_from_this<SharedArena> {
 public:
  // Maps `ranks` areas of areaBytes (a multiple of the page size) at file offset fileOffset of
  // fd (page-aligned); `me` owns area me. Throws IoError when the mapping fails.
  static std::shared_ptr<SharedArena> map(int fd, size_t fileOffset, int ranks, int me,
                                          size_t areaBytes);
  ~SharedArena() override;
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  std::shared_ptr<void> allocate(size_t bytes) override;
  size_t bytesFree() const override;
  bool contains(const void* p, size_t bytes) const override { return offsetOf(p, bytes) >= 0; }
  uint64_t partsReadInPlace() const override { return inPlace_.load(std::memory_order_relaxed); }
  uint64_t partsStaged() const override { return staged_.load(std::memory_order_relaxed); }

  // The offset of [p, p + bytes) in the arena when it lies in this rank's area, else -1.
  int64_t offsetOf(const void* p, size_t bytes) const;
  // [offset, offset + bytes) of the arena in this rank's mapping, or null when out of bounds.
  const uint8_t* at(uint64_t offset, size_t bytes) const;
  void countPart(bool readInPlace) {
    (readInPlace ? inPlace_ : staged_).fetch_add(1, std::memory_order_relaxed);
  }

 private:
  SharedArena(uint8_t* base, int ranks, int me, size_t areaBytes);
  void release(size_t offset, size_t bytes);

  uint8_t* base_;
  size_t totalBytes_;
  uint8_t* mine_;  // this rank's area
  size_t areaBytes_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset in this rank's area -> bytes, coalesced
  std::atomic<uint64_t> inPlace_{0};
  std::atomic<uint64_t> staged_{0};
};

}  // namespace shm
}  // namespace hora
