#include "core/transport/shm/window_gather.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/transport/shm/window_steps.h"

namespace hora {
namespace shm {
namespace {

// Rank r's range split into `parts` pieces as evenly as possible (the first bytes % parts get one
// byte more): piece p's offset within the range and its length.
size_t pieceOffset(size_t bytes, size_t parts, size_t p) {
  return p * (bytes / parts) + std::min(p, bytes % parts);
}
size_t pieceLength(size_t bytes, size_t parts, size_t p) {
  return bytes / parts + (p < bytes % parts ? 1 : 0);
}

}  // namespace

void windowGather(ShmLinks& links, void* out, size_t total, const std::vector<size_t>& offsets,
                  const std::vector<size_t>& bytes, const void* mine) {
  if (total == 0) return;
  WindowSteps steps(links);
  auto* dst = static_cast<uint8_t*>(out);
  const auto* src = static_cast<const uint8_t*>(mine);
  const int me = steps.me(), n = steps.size();
  // Every part carries a piece of every rank's range, so all ranks copy in (and out) at once. The
  // pieces of one part fill at most total / parts + n bytes of a half.
  const size_t room = steps.halfBytes() > static_cast<size_t>(n) ? steps.halfBytes() - n : 1;
  // With total / parts <= room, the pieces of a part fit the half: each rank's piece is at most one
  // byte above its even share, which is what the n bytes held back cover.
  const size_t parts = (total + room - 1) / room;
  // A half is written again two parts later, and only after publishAndWait() has seen every rank
  // past step 2k, that is, done reading it.
  for (size_t p = 0; p < parts; ++p) {
    const uint32_t k = steps.nextPart();
    // Where each rank's piece sits in its half: after the pieces of the ranks before it.
    size_t at = 0;
    std::vector<size_t> layout(n);
    for (int r = 0; r < n; ++r) {
      layout[r] = at;
      at += pieceLength(bytes[r], parts, p);
    }
    const size_t myLen = pieceLength(bytes[me], parts, p);
    const size_t myOff = pieceOffset(bytes[me], parts, p);
    if (myLen > 0) {
      std::memcpy(steps.half(me, k) + layout[me], src + myOff, myLen);
      // This rank's own output, unless it is already there.
      if (dst + offsets[me] != src) std::memmove(dst + offsets[me] + myOff, src + myOff, myLen);
    }
    // Every rank must have staged its piece before anyone copies from the windows.
    steps.publishAndWait(2 * k - 1, "stage its part in its window");
    for (int r : steps.others()) {
      const size_t len = pieceLength(bytes[r], parts, p);
      if (len > 0) {
        std::memcpy(dst + offsets[r] + pieceOffset(bytes[r], parts, p),
                    steps.half(r, k) + layout[r], len);
      }
    }
    // No wait here: the next part uses the other half, and the wait on its staging step covers the
    // reads of this one.
    steps.publish(2 * k);
  }
}

}  // namespace shm
}  // namespace hora
