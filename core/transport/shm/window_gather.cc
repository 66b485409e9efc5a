#include "core/transport/shm/window_gather.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/transport/shm/window_steps.h"

namespace hora {
namespace shm {

void windowGather(ShmLinks& links, void* out, size_t total, const std::vector<size_t>& offsets,
                  const std::vector<size_t>& bytes, const void* mine) {
  WindowSteps steps(links);
  auto* dst = static_cast<uint8_t*>(out);
  const auto* src = static_cast<const uint8_t*>(mine);
  const int me = steps.me();
  const size_t perPart = steps.halfBytes();
  // Rank r's range within part [a, b): [lo, hi), or empty.
  auto clip = [&](int r, size_t a, size_t b, size_t* lo, size_t* hi) {
    *lo = std::max(a, offsets[r]);
    *hi = std::min(b, offsets[r] + bytes[r]);
    return *lo < *hi;
  };
  for (size_t a = 0; a < total; a += perPart) {
    const size_t b = std::min(total, a + perPart);
    const uint32_t k = steps.nextPart();
    size_t lo, hi;
    if (clip(me, a, b, &lo, &hi)) {
      std::memcpy(steps.half(me, k) + (lo - a), src + (lo - offsets[me]), hi - lo);
      // This rank's own output, unless it is already there.
      if (dst + lo != src + (lo - offsets[me])) {
        std::memmove(dst + lo, src + (lo - offsets[me]), hi - lo);
      }
    }
    steps.publishAndWait(2 * k - 1, "stage its part in its window");
    for (int r : steps.others()) {
      if (clip(r, a, b, &lo, &hi)) std::memcpy(dst + lo, steps.half(r, k) + (lo - a), hi - lo);
    }
    steps.publish(2 * k);
  }
}

}  // namespace shm
}  // namespace hora
