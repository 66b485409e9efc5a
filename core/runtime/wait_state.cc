#include "core/runtime/wait_state.h"

namespace hora {

bool WaitState::begin() { return waiters_.fetch_add(1, std::memory_order_acq_rel) == 0; }

// The loop needs to hear of a wait's end only while the coordinator may count this rank as
// blocked (watched_). A wait that ended because its handle completed usually finds it clear: the
// batch that completed the handle made the last blocked report stale.
bool WaitState::end() {
  if (waiters_.fetch_sub(1, std::memory_order_seq_cst) != 1) return false;
  return watched_.load(std::memory_order_seq_cst);
}

// The flag first (see end()); the reports below clear it when no blocked report is current.
void WaitState::cycleStart() {
  watched_.store(true, std::memory_order_seq_cst);
  waitingNow_ = waiters_.load(std::memory_order_seq_cst) > 0;
}

bool WaitState::requestsSent(uint64_t applied) {
  reported_ = waitingNow_;
  reportedApplied_ = applied;
  return waitingNow_;
}

int WaitState::workerReport(bool awaiting, uint64_t applied) {
  // Blocked only matters while something this rank sent is unanswered: otherwise the coordinator
  // holds nothing of it, and a rank it does not know to be blocked counts as free.
  bool blocked = waitingNow_ && awaiting;
  // The coordinator counts a blocked report only while no batch was built after it, and the
  // batches only grow: once this rank applied a later one, the report counts as "not blocked"
  // for good, and saying so again would change nothing there (the usual end of a blocking call:
  // the batch that completed it made it stale).
  if (reported_ && applied != reportedApplied_) reported_ = false;
  int send = -1;
  if (blocked != reported_ || (blocked && applied != reportedApplied_)) {
    send = blocked ? 1 : 0;
    if (!blocked) endReports_.fetch_add(1, std::memory_order_relaxed);
    reported_ = blocked;
    reportedApplied_ = applied;
  }
  watched_.store(reported_, std::memory_order_seq_cst);
  return send;
}

bool WaitState::rankZeroReport(bool awaiting) {
  bool blocked = waitingNow_ && awaiting;
  watched_.store(blocked, std::memory_order_seq_cst);
  return blocked;
}

}  // namespace hora
