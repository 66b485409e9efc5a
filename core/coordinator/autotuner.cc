#include "core/coordinator/autotuner.h"

#include <algorithm>

#include "core/common/logging.h"

namespace hora {
namespace {

constexpr int64_t kMiB = 1 << 20;
const int64_t kThresholds[] = {0,         1 * kMiB,  4 * kMiB,  8 * kMiB,
                               16 * kMiB, 32 * kMiB, 64 * kMiB, 128 * kMiB};
const double kCycleTimes[] = {0.5, 1, 2.5, 5, 10};

}  // namespace

Autotuner::Autotuner(const Settings& s)
    : active_(s.autotune),
      tuneThreshold_(!s.fusionThresholdSet),
      tuneCycle_(!s.cycleTimeSet),
      warmupSamples_(static_cast<int>(s.autotuneWarmupSamples)),
      stepsPerSample_(std::max<int>(1, static_cast<int>(s.autotuneStepsPerSample))),
      samplesPerCandidate_(std::max<int>(1, static_cast<int>(s.autotuneSamplesPerCandidate))),
      best_{s.fusionThreshold, s.cycleTimeMs},
      warmupLeft_(static_cast<int>(s.autotuneWarmupSamples)) {
  if (!tuneThreshold_ && !tuneCycle_) active_ = false;
  if (!active_) return;
  if (!s.autotuneLog.empty()) {
    log_.open(s.autotuneLog, std::ios::out | std::ios::trunc);
    log_ << "cycle_time_ms,tensor_fusion_threshold,score\n";
  }
  thresholdPhase_ = tuneThreshold_;
  buildCandidates(thresholdPhase_);
}

void Autotuner::buildCandidates(bool fromThresholds) {
  candidates_.clear();
  current_ = 0;
  if (fromThresholds) {
    for (int64_t t : kThresholds) candidates_.push_back({t, best_.cycleMs});
  } else {
    for (double c : kCycleTimes) candidates_.push_back({best_.threshold, c});
  }
}

double Autotuner::median(std::vector<double> v) const {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Autotuner::log(const Candidate& c, double score) {
  if (log_.is_open()) log_ << c.cycleMs << "," << c.threshold << "," << score << std::endl;
}

std::optional<TunedParams> Autotuner::onStep(Clock::time_point now) {
  if (!active_) return std::nullopt;
  if (step_++ == 0) {
    sampleStart_ = now;
    bytes_ = 0;
    const Candidate& c = candidates_[current_];
    return TunedParams{c.threshold, c.cycleMs};
  }
  if (++stepsInSample_ < stepsPerSample_) return std::nullopt;
  stepsInSample_ = 0;
  double seconds = std::chrono::duration<double>(now - sampleStart_).count();
  double score = seconds > 0 ? static_cast<double>(bytes_) / seconds : 0;
  sampleStart_ = now;
  bytes_ = 0;
  if (warmupLeft_ > 0) {
    --warmupLeft_;
    return std::nullopt;
  }
  scores_.push_back(score);
  if (static_cast<int>(scores_.size()) < samplesPerCandidate_) return std::nullopt;

  const Candidate& c = candidates_[current_];
  double s = median(scores_);
  scores_.clear();
  log(c, s);
  if (s > bestScore_) {
    bestScore_ = s;
    best_ = c;
  }
  if (++current_ < candidates_.size()) {
    warmupLeft_ = 1;  // let the pipeline settle on the new values
    const Candidate& next = candidates_[current_];
    return TunedParams{next.threshold, next.cycleMs};
  }
  if (thresholdPhase_ && tuneCycle_) {
    thresholdPhase_ = false;
    buildCandidates(false);
    warmupLeft_ = 1;
    const Candidate& next = candidates_[current_];
    return TunedParams{next.threshold, next.cycleMs};
  }
  active_ = false;
  HORA_LOG(Info, "autotune settled on fusion threshold " << best_.threshold << " bytes, cycle time "
                                                         << best_.cycleMs << " ms");
  log(best_, bestScore_);
  return TunedParams{best_.threshold, best_.cycleMs};
}

}  // namespace hora
