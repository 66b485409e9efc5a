#pragma once
// A spin budget that follows what the recent waits needed. Polling before a sleep pays off only
// when the event usually comes within the budget; when waits keep outlasting it (a long step, a
// slow peer), every spin is CPU taken from the threads that do the work (4 threads share 2
// cores at 2 ranks). So:
//   - a wait that ended during its spin (a hit) keeps the full budget;
//   - after kMissesToStop waits in a row that spun the whole budget and then slept (misses), the
//     budget is 0: waits sleep at once;
//   - while stopped, every kProbeEvery-th wait spins the full budget again (a probe), so a return
//     to short waits is noticed; a probe that hits restores spinning.
// Waits that found the event before spinning say nothing about the spin and are not recorded.
// Thread-safe (relaxed atomics: several waiters may race, which only blurs the counts).
#include <atomic>
#include <cstdint>

#include "core/common/time.h"

namespace hora {

class AdaptiveSpin {
 public:
  static constexpr int kMissesToStop = 3;
  static constexpr int kProbeEvery = 8;

  explicit AdaptiveSpin(Micros full) : full_(full) {}

  // The budget for the next wait.
  Micros budget();
  // What the wait that was given a non-zero budget needed: true when it ended within the spin.
  void record(bool hit);
  bool spinning() const { return misses_.load(std::memory_order_relaxed) < kMissesToStop; }
  Micros full() const { return full_; }

 private:
  const Micros full_;
  std::atomic<int> misses_{0};           // waits in a row that outlasted the spin
  std::atomic<uint32_t> sinceProbe_{0};  // waits that skipped the spin since the last probe
};

}  // namespace hora
