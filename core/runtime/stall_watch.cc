#include "core/runtime/stall_watch.h"

#include <algorithm>

namespace hora {

bool StallWatch::checkDeadlocks(Coordinator& coordinator, Clock::time_point now) {
  if (now < deadlockCheckAt_) return false;
  coordinator.failDeadlocks(now);
  deadlockCheckAt_ = now + kDeadlockCheckInterval;
  return true;
}

void StallWatch::inspectStalls(Coordinator& coordinator, const ProcessSetTable& sets,
                               Clock::time_point now) {
  if (stalls_.untilNextCheck(coordinator, now).count() != 0) return;
  auto verdict = stalls_.check(coordinator, sets, now);
  if (verdict.shutdown) coordinator.requestShutdown(verdict.report);
}

Millis StallWatch::untilNextCheck(const Coordinator& coordinator, Clock::time_point now) const {
  Millis check = stalls_.untilNextCheck(coordinator, now);
  if (!coordinator.watchingDeadlocks()) return check;
  Millis deadlocks = millisUntil(deadlockCheckAt_, now);
  return check.count() < 0 ? deadlocks : std::min(check, deadlocks);
}

}  // namespace hora
