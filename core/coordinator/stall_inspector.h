#pragma once
// StallInspector: on world rank 0, finds tensors that some ranks submitted and others have not for
// longer than HORA_STALL_CHECK_TIME_SECONDS, and logs which ranks are missing which tensors, with
// the call site (file:line) where the waiting ranks submitted them. Past
// HORA_STALL_SHUTDOWN_TIME_SECONDS (when > 0) it asks for the job to end with that report.
//
// Background thread of rank 0 only.
#include <set>
#include <string>

#include "core/common/settings.h"
#include "core/common/time.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/process_set_table.h"

namespace hora {

class StallInspector {
 public:
  explicit StallInspector(const Settings& settings);

  // How long the loop may sleep before the next check is due; -1 when there is nothing to watch.
  Millis untilNextCheck(const Coordinator& coordinator, Clock::time_point now) const;

  struct Verdict {
    bool shutdown = false;
    std::string report;  // set when shutdown
  };
  Verdict check(const Coordinator& coordinator, const ProcessSetTable& sets, Clock::time_point now);

 private:
  bool disabled_;
  Millis warnAfter_;
  Millis shutdownAfter_;  // 0 = never
  Clock::time_point lastCheck_{};
  std::set<std::string> warned_;
};

}  // namespace hora
