#include "core/common/adaptive_spin.h"

namespace hora {

Micros AdaptiveSpin::budget() {
  if (full_.count() <= 0 || spinning()) return full_;
  if (sinceProbe_.fetch_add(1, std::memory_order_relaxed) + 1 < kProbeEvery) return Micros(0);
  sinceProbe_.store(0, std::memory_order_relaxed);
  return full_;
}

void AdaptiveSpin::record(bool hit) {
  if (hit) {
    misses_.store(0, std::memory_order_relaxed);
    sinceProbe_.store(0, std::memory_order_relaxed);
    return;
  }
  int m = misses_.load(std::memory_order_relaxed);
  if (m < kMissesToStop) misses_.store(m + 1, std::memory_order_relaxed);
}

}  // namespace hora
