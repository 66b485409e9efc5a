#include "core/coordinator/stall_inspector.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/common/logging.h"

namespace hora {
namespace {

constexpr size_t kNamesPerRank = 6;
// Checks run at most this often, however short the warning time.
constexpr Millis kMinCheckInterval{200};

}  // namespace

StallInspector::StallInspector(const Settings& settings)
    : disabled_(settings.stallCheckDisable),
      warnAfter_(secondsToMillis(settings.stallCheckTimeSeconds)),
      shutdownAfter_(secondsToMillis(settings.stallShutdownTimeSeconds)) {}

Millis StallInspector::untilNextCheck(const Coordinator& coordinator, Clock::time_point now) const {
  if (disabled_ || coordinator.pending().empty()) return Millis(-1);
  Millis interval = std::max(kMinCheckInterval, std::min(warnAfter_, Millis(5000)));
  auto due = lastCheck_ + interval;
  return due <= now ? Millis(0) : std::chrono::ceil<Millis>(due - now);
}

StallInspector::Verdict StallInspector::check(const Coordinator& coordinator,
                                              const ProcessSetTable& sets, Clock::time_point now) {
  Verdict verdict;
  if (disabled_) return verdict;
  lastCheck_ = now;
  std::map<int, std::vector<std::string>> missingByRank;
  std::ostringstream details;
  bool anyNew = false, pastShutdown = false;
  for (const auto& kv : coordinator.pending()) {
    const PendingTensor& p = kv.second;
    auto waited = now - p.firstSeen;
    if (waited < warnAfter_ || !sets.contains(p.processSetId)) continue;
    if (shutdownAfter_.count() > 0 && waited >= shutdownAfter_) pastShutdown = true;
    std::vector<int> have = coordinator.submitters(p);
    std::vector<int> missing;
    for (int r : sets.ranks(p.processSetId)) {
      if (!std::binary_search(have.begin(), have.end(), r) && !coordinator.joined()[r]) {
        missing.push_back(r);
        missingByRank[r].push_back(p.name);
      }
    }
    if (warned_.insert(kv.first).second) anyNew = true;
    double secs = std::chrono::duration<double>(waited).count();
    details << "\n  " << p.name << " (" << coordinator.kindOf(p) << ", process set "
            << p.processSetId << "), waiting " << std::fixed << std::setprecision(1) << secs
            << " s: submitted by ranks [";
    for (size_t i = 0; i < have.size(); ++i) details << (i ? ", " : "") << have[i];
    details << "] at " << coordinator.callSiteOf(p) << "; missing ranks [";
    for (size_t i = 0; i < missing.size(); ++i) details << (i ? ", " : "") << missing[i];
    details << "]";
  }
  if (missingByRank.empty()) return verdict;
  std::ostringstream report;
  report << "One or more tensors were submitted to be reduced, gathered or broadcasted by a "
            "subset of ranks and are waiting for the remaining ranks for more than "
         << warnAfter_.count() / 1000.0
         << " seconds. This may indicate that different ranks are trying to submit different "
            "tensors or that only a subset of ranks is submitting tensors, which will cause a "
            "deadlock.\nMissing ranks:";
  for (const auto& kv : missingByRank) {
    report << "\n" << kv.first << ": [";
    for (size_t i = 0; i < kv.second.size() && i < kNamesPerRank; ++i) {
      report << (i ? ", " : "") << kv.second[i];
    }
    report << (kv.second.size() > kNamesPerRank ? " ...]" : "]");
  }
  report << "\nStalled tensors:" << details.str();
  if (pastShutdown) {
    verdict.shutdown = true;
    verdict.report =
        report.str() + "\nStalled past HORA_STALL_SHUTDOWN_TIME_SECONDS. Will shutdown.";
    HORA_LOG(Error, verdict.report);
  } else if (anyNew) {
    HORA_LOG(Warning, report.str());
  }
  return verdict;
}

}  // namespace hora
