#pragma once
// SharedPool: memory of this rank that the job's other ranks read in place.
//
// A frontend places tensors there (gradients, DistributedOptimizer's shared_gradients); when a
// collective's input lies in it, a transport that maps the pool on every rank reads it from
// there instead of copying it into a staging buffer first.
//
// Contract:
// - allocate() is thread-safe and cheap; the memory is zeroed. A block and the pool's mapping
//   live until the last copy of the returned pointer goes, even after the job ends or fails, so
//   a framework tensor viewing a block never dangles.
// - A full pool returns null: the caller keeps its tensor in private memory.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hora {

class SharedPool {
 public:
  virtual ~SharedPool() = default;
  // A zeroed block of `bytes` bytes, page-aligned, or null when there is no room.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  // Bytes still free for allocate() (in whole pages).
  virtual size_t bytesFree() const = 0;
  // Whether [p, p + bytes) lies in this rank's part of the pool.
  virtual bool contains(const void* p, size_t bytes) const = 0;
  // Parts of window allreduces that the peers read from this pool in place, and parts that were
  // copied into the window instead (not in the pool, or not contiguous there).
  virtual uint64_t partsReadInPlace() const = 0;
  virtual uint64_t partsStaged() const = 0;
};

}  // namespace hora
