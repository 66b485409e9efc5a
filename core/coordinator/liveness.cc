#include "core/coordinator/liveness.h"

#include <algorithm>

namespace hora {
namespace {

// Pings more often than this would only add traffic: a live loop answers within a cycle.
constexpr Millis kMinInterval{20};

}  // namespace

Liveness::Liveness(int worldSize, Millis timeout)
    : peers_(static_cast<size_t>(std::max(worldSize, 0))),
      timeout_(timeout),
      interval_(std::max(kMinInterval, timeout / 4)) {}

void Liveness::heard(int rank, Clock::time_point now) {
  if (rank < 0 || static_cast<size_t>(rank) >= peers_.size()) return;
  Peer& p = peers_[rank];
  p.since = std::max(p.since, now);
}

void Liveness::paused(Clock::duration busy) {
  for (auto& p : peers_) {
    if (p.watched) p.since += busy;
  }
}

Liveness::Verdict Liveness::check(const std::vector<int>& watched, Clock::time_point now) {
  std::vector<bool> wanted(peers_.size(), false);
  for (int r : watched) {
    if (r >= 0 && static_cast<size_t>(r) < peers_.size()) wanted[r] = true;
  }
  Verdict v;
  for (size_t r = 0; r < peers_.size(); ++r) {
    Peer& p = peers_[r];
    if (!wanted[r]) {
      p.watched = false;
      continue;
    }
    if (!p.watched) {
      p.watched = true;
      p.since = now;
      p.lastPing = now;
      continue;
    }
    auto quiet = now - p.since;
    if (quiet >= timeout_) {
      if (v.silent < 0) {
        v.silent = static_cast<int>(r);
        v.silentFor = std::chrono::duration_cast<Millis>(quiet);
      }
      continue;
    }
    if (quiet >= interval_ && now - p.lastPing >= interval_) {
      p.lastPing = now;
      v.ping.push_back(static_cast<int>(r));
    }
  }
  return v;
}

Millis Liveness::untilNextCheck(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& p : peers_) {
    if (!p.watched) continue;
    next = std::min(next, p.since + timeout_);
    next = std::min(next, std::max(p.since, p.lastPing) + interval_);
  }
  if (next == Clock::time_point::max()) return Millis(-1);
  return next <= now ? Millis(0) : std::chrono::ceil<Millis>(next - now);
}

}  // namespace hora
