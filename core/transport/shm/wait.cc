#include "core/transport/shm/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

#include "core/common/errors.h"

namespace hora {
namespace shm {
namespace {

// A sleeper re-checks for failures this often: a dead peer fails the wait within one slice.
constexpr int kSliceMs = 20;

inline void cpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Not FUTEX_PRIVATE: the word lives in a mapping shared between processes.
void futexWait(std::atomic<uint32_t>* word, uint32_t seen, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

}  // namespace

void ring(Doorbell& d) {
  // Bump first, then look for sleepers, the mirror of the waiter's announce-then-recheck: with both
  // sequentially consistent, either the waiter sees the new state or this sees the sleeper.
  d.bell.fetch_add(1, std::memory_order_seq_cst);
  if (d.sleepers.load(std::memory_order_seq_cst) > 0) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d.bell), FUTEX_WAKE, INT32_MAX, nullptr,
              nullptr, 0);
  }
}

bool waitUntil(Doorbell& mine, const WaitPolicy& policy, const std::function<bool()>& ready,
               const std::function<std::string()>& failed) {
  if (ready()) return true;
  const auto start = Clock::now();
  if (policy.pause.count() > 0) {
    const auto end = start + policy.pause;
    do {
      // Several pauses between checks keep the reads of the shared line and of the clock from
      // dominating the spin.
      for (int i = 0; i < 16; ++i) cpuPause();
      if (ready()) return true;
    } while (Clock::now() < end);
  }
  if (policy.yield.count() > 0) {
    const auto end = Clock::now() + policy.yield;
    do {
      ::sched_yield();
      if (ready()) return true;
    } while (Clock::now() < end);
  }
  // The timeout counts from the start of the wait, spin stages included.
  const auto deadline = start + policy.timeout;
  for (;;) {
    // A peer that left may have published what this wait needs just before: look again after
    // seeing it gone (its gone flag is stored after its data).
    std::string why = failed();
    if (!why.empty()) {
      if (ready()) return true;
      throw IoError(why);
    }
    // The eventcount: read the bell, announce the sleeper, re-check, then sleep only if the bell
    // has not moved since it was read (a publisher bumps it after publishing, then wakes).
    uint32_t seen = mine.bell.load(std::memory_order_seq_cst);
    mine.sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool ok = ready();
    if (!ok) {
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
      if (left > 0)
        // left is rounded down to whole milliseconds; the extra one keeps the last sleep from
        // ending just before the deadline and going round once more for nothing.
        futexWait(&mine.bell, seen, static_cast<int>(std::min<long>(left, kSliceMs) + 1));
    }
    mine.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    // A wake-up says only that something changed, maybe for another waiter of this rank, so the
    // condition is checked again.
    if (ok || ready()) return true;
    if (Clock::now() >= deadline) return false;
  }
}

}  // namespace shm
}  // namespace hora
