#pragma once
// TunedSettings: the values autotune changes while the job runs (fusion threshold, cycle time),
// as the background loop last applied them, for Runtime::settings() on any thread.
#include <cstdint>
#include <mutex>

#include "core/common/settings.h"
#include "core/coordinator/autotuner.h"

namespace hora {

class TunedSettings {
 public:
  explicit TunedSettings(const Settings& start)
      : params_{start.fusionThreshold, start.cycleTimeMs} {}

  // Background thread. fusionThreshold < 0: unchanged.
  void publish(double cycleTimeMs, int64_t fusionThreshold) {
    std::lock_guard<std::mutex> lock(mu_);
    params_.cycleTimeMs = cycleTimeMs;
    if (fusionThreshold >= 0) params_.fusionThreshold = fusionThreshold;
  }
  // Any thread: `s` with the tuned values in force.
  Settings applyTo(Settings s) const {
    std::lock_guard<std::mutex> lock(mu_);
    s.fusionThreshold = params_.fusionThreshold;
    s.cycleTimeMs = params_.cycleTimeMs;
    return s;
  }

 private:
  mutable std::mutex mu_;
  TunedParams params_;  // guarded by mu_
};

}  // namespace hora
