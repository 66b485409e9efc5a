#pragma once
// StallWatch: on world rank 0, when the background loop looks for stalled tensors
// (core/coordinator/stall_inspector.h) and for deadlocks (Coordinator::failDeadlocks). Both walk
// every pending tensor: they run on a period, not on every cycle.
//
// Background thread of rank 0 only; explicit clock.
#include "core/common/settings.h"
#include "core/common/time.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/stall_inspector.h"

namespace hora {

class StallWatch {
 public:
  // How often rank 0 looks for deadlocks while tensors are pending.
  static constexpr Millis kDeadlockCheckInterval{200};

  explicit StallWatch(const Settings& settings) : stalls_(settings) {}

  // Fails the deadlocked tensors when a look is due; returns whether it looked.
  bool checkDeadlocks(Coordinator& coordinator, Clock::time_point now);
  // Logs stalled tensors when a look is due, and asks the coordinator to end the job past
  // HORA_STALL_SHUTDOWN_TIME_SECONDS.
  void inspectStalls(Coordinator& coordinator, const ProcessSetTable& sets, Clock::time_point now);
  // How long the loop may sleep before either look is due; -1 when neither has anything to watch.
  Millis untilNextCheck(const Coordinator& coordinator, Clock::time_point now) const;

 private:
  StallInspector stalls_;
  Clock::time_point deadlockCheckAt_{};
};

}  // namespace hora
