#include "core/runtime/peer_watch.h"

#include <algorithm>
#include <string>

#include "core/common/errors.h"

namespace hora {

PeerWatch::PeerWatch(int rank, int worldSize, Millis timeout,
                     std::function<std::string(int)> relays)
    : liveness_(worldSize, timeout), rank_(rank), relays_(std::move(relays)) {}

std::vector<int> PeerWatch::check(Clock::time_point now,
                                  const std::function<std::vector<int>()>& watched) {
  if (now < checkAt_ && liveness_.untilNextCheck(now).count() >= 0) return {};
  checkAt_ = now + kCheckInterval;
  Liveness::Verdict v = liveness_.check(watched(), now);
  if (v.silent >= 0) {
    bool coordinator = rank_ == 0;
    std::string who = coordinator ? "rank " + std::to_string(v.silent) : "rank 0 (the coordinator)";
    std::string whom = coordinator ? "other ranks wait" : "this rank waits";
    // Behind a relay, silence may be the relay's: the message names the ranks in between.
    std::string via = relays_ ? relays_(v.silent) : "";
    if (!via.empty())
      via = "; messages pass through rank(s) " + via + ", which may be the silent one";
    throw TimeoutError("rank " + std::to_string(rank_) + ": " + who +
                       " is unresponsive: it sent nothing on its control connection for " +
                       std::to_string(v.silentFor.count()) + " ms while " + whom +
                       " for it (stopped, hung or unreachable; HORA_TIMEOUT_SECONDS bounds this)" +
                       via);
  }
  return v.ping;
}

Millis PeerWatch::untilNextCheck(Clock::time_point now) const {
  Millis alive = liveness_.untilNextCheck(now);
  if (alive.count() < 0) return alive;
  return std::max(alive, millisUntil(checkAt_, now));
}

}  // namespace hora
