#pragma once
// PeerWatch: when the background loop looks for silent control-channel peers, and what it does
// about them (core/coordinator/liveness.h holds the rules of silence itself).
//
// A worker waits for rank 0 while it has requests unanswered; rank 0 waits for the ranks a
// pending tensor misses. A stopped peer keeps its connection open (its kernel even answers
// keepalive), so silence is the only sign: past HORA_TIMEOUT_SECONDS the job fails, naming it.
// Finding the watched ranks walks every pending tensor, so while some are watched the loop looks
// every kCheckInterval only; with none watched it looks every cycle, so that a wait that begins is
// watched from its first cycle.
//
// Background thread only; explicit clock.
#include <functional>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/coordinator/liveness.h"

namespace hora {

class PeerWatch {
 public:
  // Pings go out at most every 20 ms anyway (a quarter of the shortest timeout).
  static constexpr Millis kCheckInterval{20};

  // relays(peer): the ranks that pass messages between this rank and peer ("" none;
  // ControlChannel::relays), named beside a silent peer since one of them may be the silent one.
  PeerWatch(int rank, int worldSize, Millis timeout,
            std::function<std::string(int)> relays = nullptr);

  void heard(int from, Clock::time_point now) { liveness_.heard(from, now); }
  // This rank read no control message for `busy` (it ran collectives): nobody's silence.
  void paused(Clock::duration busy) { liveness_.paused(busy); }

  // When due, asks `watched` for the ranks this rank waits for now and returns those to ping;
  // throws TimeoutError naming a watched rank silent for the whole timeout.
  std::vector<int> check(Clock::time_point now, const std::function<std::vector<int>()>& watched);
  // How long the loop may sleep before check() is due; -1 when nothing is watched.
  Millis untilNextCheck(Clock::time_point now) const;

 private:
  Liveness liveness_;
  int rank_;
  std::function<std::string(int)> relays_;
  Clock::time_point checkAt_{};  // next look for the watched ranks
};

}  // namespace hora
