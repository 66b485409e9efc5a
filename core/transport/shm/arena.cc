#include "core/transport/shm/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include "core/common/errors.h"

namespace hora {
namespace shm {

size_t pageBytes() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

size_t roundUpToPage(size_t n) {
  const size_t page = pageBytes();
  return (n + page - 1) / page * page;
}

namespace {

// Reserves the pages of [p, p + n) now. Older kernels lack MADV_POPULATE_WRITE: touching every
// page instead reserves them too, with a SIGBUS rather than an error when memory is short.
bool reservePages(uint8_t* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return true;
  // EINVAL means this kernel does not know the advice; any other error (such as ENOMEM) means the
  // pages could not be had, which is what the caller must learn.
  if (errno != EINVAL) return false;
#endif
  for (size_t at = 0; at < n; at += pageBytes()) {
    // volatile keeps the compiler from dropping a store of zero to memory that already reads as
    // zero.
    reinterpret_cast<volatile uint8_t*>(p)[at] = 0;
  }
  return true;
}

}  // namespace

std::shared_ptr<SharedArena> SharedArena::map(int fd, size_t fileOffset, int ranks, int me,
                                              size_t areaBytes) {
  HORA_CHECK(ranks >= 1 && me >= 0 && me < ranks && areaBytes > 0 && areaBytes % pageBytes() == 0 &&
                 fileOffset % pageBytes() == 0,
             "bad arena shape");
  const size_t total = areaBytes * static_cast<size_t>(ranks);
  // No MAP_POPULATE: the areas are holes until their blocks are allocated.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   static_cast<off_t>(fileOffset));
  if (p == MAP_FAILED) {
    throw IoError(std::string("shared memory: mmap of the arena failed (HORA_SHM_ARENA_BYTES=0 "
                              "goes without it): ") +
                  std::strerror(errno));
  }
  return std::shared_ptr<SharedArena>(
      new SharedArena(static_cast<uint8_t*>(p), ranks, me, areaBytes));
}

SharedArena::SharedArena(uint8_t* base, int ranks, int me, size_t areaBytes)
    : base_(base),
      totalBytes_(areaBytes * static_cast<size_t>(ranks)),
      mine_(base + areaBytes * static_cast<size_t>(me)),
      areaBytes_(areaBytes) {
  free_[0] = areaBytes;
}

SharedArena::~SharedArena() { ::munmap(base_, totalBytes_); }

std::shared_ptr<void> SharedArena::allocate(size_t bytes) {
  // Whole pages, because pages are what is reserved here and given back on release; a zero-byte
  // request still gets a block of its own so its pointer is distinct.
  const size_t n = roundUpToPage(bytes == 0 ? 1 : bytes);
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.begin();
    // First fit in offset order: blocks come from the low end of the area and the free list stays
    // short.
    while (it != free_.end() && it->second < n) ++it;
    if (it == free_.end()) return nullptr;
    offset = it->first;
    const size_t left = it->second - n;
    free_.erase(it);
    if (left > 0) free_[offset + n] = left;
  }
  // Pages are reserved outside the lock: the block is already off the free list, and reserving can
  // take long for a large block.
  if (!reservePages(mine_ + offset, n)) {
    release(offset, n);
    return nullptr;
  }
  // The deleter holds the arena, so the mapping outlives the segment for as long as any block is in
  // use.
  auto self = shared_from_this();
  return std::shared_ptr<void>(mine_ + offset,
                               [self, offset, n](void*) { self->release(offset, n); });
}

void SharedArena::release(size_t offset, size_t bytes) {
  // The pages go back to the system; the block reads as zeros when it is handed out again.
  if (::madvise(mine_ + offset, bytes, MADV_REMOVE) != 0) std::memset(mine_ + offset, 0, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Coalescing with both neighbours keeps the free list from fragmenting into page-sized pieces.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

size_t SharedArena::bytesFree() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [offset, bytes] : free_) total += bytes;
  return total;
}

int64_t SharedArena::offsetOf(const void* p, size_t bytes) const {
  const auto* q = static_cast<const uint8_t*>(p);
  // Written to avoid overflow: bytes is compared with the area first, so areaBytes_ - bytes cannot
  // wrap.
  if (q < mine_ || bytes > areaBytes_ || static_cast<size_t>(q - mine_) > areaBytes_ - bytes) {
    return -1;
  }
  return q - base_;
}

const uint8_t* SharedArena::at(uint64_t offset, size_t bytes) const {
  // The offset comes from a peer's published line, so it is checked without an addition that could
  // overflow.
  if (bytes > totalBytes_ || offset > totalBytes_ - bytes) return nullptr;
  return base_ + offset;
}

}  // namespace shm
}  // namespace hora
