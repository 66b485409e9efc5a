#include "core/coordinator/deadlock.h"

#include <cstddef>

namespace hora {

std::vector<int> findDeadlockedRanks(const std::vector<PendingView>& pending,
                                     const std::vector<bool>& blocked) {
  const size_t n = blocked.size();
  auto valid = [n](int r) { return r >= 0 && static_cast<size_t>(r) < n; };
  // free[r]: rank r may still submit something (now or once one of its tensors runs).
  std::vector<bool> free(n);
  std::vector<bool> hasPending(n, false);
  for (const auto& p : pending) {
    for (int r : p.submitted) {
      if (valid(r)) hasPending[r] = true;
    }
  }
  for (size_t r = 0; r < n; ++r) free[r] = !blocked[r] || !hasPending[r];
  // A tensor whose missing ranks are all free may run one day, releasing its submitters.
  bool changed = true;
  while (changed) {
    changed = false;
    for (const auto& p : pending) {
      bool mayRun = true;
      for (int r : p.missing) {
        if (valid(r) && !free[r]) mayRun = false;
      }
      if (!mayRun) continue;
      for (int r : p.submitted) {
        if (valid(r) && !free[r]) {
          free[r] = true;
          changed = true;
        }
      }
    }
  }
  std::vector<int> stuck;
  for (size_t r = 0; r < n; ++r) {
    if (!free[r]) stuck.push_back(static_cast<int>(r));
  }
  return stuck;
}

}  // namespace hora
