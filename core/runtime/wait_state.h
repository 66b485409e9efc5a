#pragma once
// WaitState: which frontend threads are blocked in a wait, and what the background loop last told
// the coordinator about it.
//
// The coordinator finds deadlocks from the ranks' wait reports (core/coordinator/deadlock.h), so a
// rank reports "blocked" when a frontend thread waits without timeout while something this rank
// sent is still unanswered, and reports again when that changes or when a batch it applied made
// the last report stale.
//
// Threads: begin()/end() from any frontend thread (lock-free); every other method from the
// background thread only. The pair waiters_/watched_ is the handshake between them: the loop
// stores watched_ and then loads waiters_ (cycleStart()), end() decrements waiters_ and then loads
// watched_, both sequentially consistent, so that either the loop sees the wait end or end() asks
// for a wake-up.
#include <atomic>
#include <cstdint>

namespace hora {

class WaitState {
 public:
  // Frontend threads. Each returns true when the background loop must be woken to hear of it.
  bool begin();
  bool end();

  // Background thread, at the start of each cycle: from here on, a wait that ends wakes the loop.
  void cycleStart();
  // Whether a frontend thread waited when the cycle started.
  bool waitingNow() const { return waitingNow_; }

  // Requests are going out now: they carry waitingNow() as their wait state.
  bool requestsSent(uint64_t applied);

  // What a worker must tell the coordinator about its wait state, when nothing else goes out.
  // awaiting: something this rank sent is unanswered; applied: the batches applied so far.
  // Returns 1 (blocked) or 0 (not blocked) to send now, or -1 when nothing is to be sent; the
  // report counts as made.
  int workerReport(bool awaiting, uint64_t applied);
  // Rank 0 tells its coordinator directly: the wait state it reports now.
  bool rankZeroReport(bool awaiting);

  // Reports that a wait ended (for counters()); any thread.
  uint64_t endReports() const { return endReports_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> waiters_{0};  // frontend threads blocked in a wait without timeout
  // The loop may count a wait as blocked, now or in its current cycle: the end of one must wake it.
  std::atomic<bool> watched_{false};
  std::atomic<uint64_t> endReports_{0};
  bool waitingNow_ = false;       // read at the start of each cycle
  bool reported_ = false;         // the wait state last sent to the coordinator
  uint64_t reportedApplied_ = 0;  // and the applied-batch count sent with it
};

}  // namespace hora
