#pragma once
// Liveness: notices a control-channel peer that has gone silent while this rank waits for it.
//
// A stopped process (SIGSTOP, a debugger's pause) keeps its connections open and its kernel still
// answers TCP keepalive, so only the application can tell that it no longer speaks. A worker
// waits for rank 0 while it has requests unanswered; rank 0 waits for the workers that a pending
// tensor still misses. The background loop tells check() which ranks it waits for, every cycle.
// A watched rank heard from within the last interval() is fine; after that it is sent a ping
// (at most one per interval), which a live peer's background loop answers at once; one silent
// for the whole timeout is reported, and the loop fails the job naming it.
//
// Silence counts only time this rank listened: a rank that was busy itself (executing a
// collective, during which it reads no control message) says so with paused(), and each watched
// rank's silence restarts that much later. A rank starts being watched with a clean slate, so an
// idle spell before it was needed never counts against it.
//
// Pure logic with an explicit clock; background thread only.
#include <vector>

#include "core/common/time.h"

namespace hora {

class Liveness {
 public:
  // timeout: the silence that fails the job (HORA_TIMEOUT_SECONDS); pings go out after a quarter
  // of it.
  Liveness(int worldSize, Millis timeout);

  Millis timeout() const { return timeout_; }
  Millis interval() const { return interval_; }

  // A message (of any kind) arrived from `rank`.
  void heard(int rank, Clock::time_point now);
  // This rank did not listen for `busy` (it ran a collective): nobody's silence grows meanwhile.
  void paused(Clock::duration busy);

  struct Verdict {
    std::vector<int> ping;  // watched ranks to send a ping to now
    int silent = -1;        // a watched rank silent for the whole timeout, or -1
    Millis silentFor{0};
  };
  // watched: the ranks this rank waits for now, in any order (never this rank itself).
  Verdict check(const std::vector<int>& watched, Clock::time_point now);
  // How long the loop may sleep before check() has something to do; -1 when nothing is watched.
  Millis untilNextCheck(Clock::time_point now) const;

 private:
  struct Peer {
    bool watched = false;
    Clock::time_point since{};     // silence counts from here
    Clock::time_point lastPing{};  // last ping sent while watched
  };

  std::vector<Peer> peers_;
  Millis timeout_;
  Millis interval_;
};

}  // namespace hora
