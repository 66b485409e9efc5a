#pragma once
// Autotuner: on world rank 0, tunes the fusion threshold and the cycle time online from measured
// throughput (bytes reduced per second over a sample of training steps).
//
// Method: coordinate descent over a small ladder of candidates: first every fusion threshold at
// the current cycle time, then every cycle time at the best threshold; each candidate is scored
// by the median of a few samples after warm-up samples are dropped. It needs at most
// (thresholds + cycle times) x samples-per-candidate samples (13 x 3 by default), fewer than the
// Bayesian optimisation Horovod runs, and never leaves the measured ladder. Values set
// explicitly in the environment are left alone. The chosen values reach the other ranks inside
// the next response batch.
//
// Background thread of rank 0 only.
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/common/settings.h"
#include "core/common/time.h"

namespace hora {

struct TunedParams {
  int64_t fusionThreshold;
  double cycleTimeMs;
};

class Autotuner {
 public:
  explicit Autotuner(const Settings& settings);

  bool active() const { return active_; }
  void recordBytes(int64_t bytes) { bytes_ += bytes; }
  // A training step began. Returns new parameters when the tuner moves to another candidate or
  // settles.
  std::optional<TunedParams> onStep(Clock::time_point now);

 private:
  struct Candidate {
    int64_t threshold;
    double cycleMs;
  };
  void buildCandidates(bool fromThresholds);
  double median(std::vector<double> v) const;
  void log(const Candidate& c, double score);

  bool active_;
  bool tuneThreshold_, tuneCycle_;
  int warmupSamples_, stepsPerSample_, samplesPerCandidate_;
  std::vector<Candidate> candidates_;
  size_t current_ = 0;
  bool thresholdPhase_ = true;
  Candidate best_{};
  double bestScore_ = -1;
  int step_ = 0;
  int stepsInSample_ = 0;
  int warmupLeft_;
  std::vector<double> scores_;
  int64_t bytes_ = 0;
  Clock::time_point sampleStart_{};
  std::ofstream log_;
};

}  // namespace hora
