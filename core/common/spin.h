#pragma once
// Waiting in two phases: poll for a short, bounded time while yielding the processor, then
// block. A hand-off between threads that sleep costs a kernel wake-up (tens of microseconds when
// the woken thread's core is idle, as in most VMs); a waiter that is still polling sees the event
// at once. Yielding between polls lets any other runnable thread on the core go first, so an
// oversubscribed machine loses at most the budget per wait, never a busy core.
#include <thread>

#include "core/common/time.h"

namespace hora {

// Polls ready() until it returns true (-> true) or `budget` passes (-> false).
template <typename Ready>
bool spinUntil(Micros budget, Ready&& ready) {
  if (ready()) return true;
  if (budget.count() <= 0) return false;
  const auto deadline = Clock::now() + budget;
  while (Clock::now() < deadline) {
    std::this_thread::yield();
    if (ready()) return true;
  }
  return false;
}

// How many CPUs the calling thread may run on (its affinity); 0 when that cannot be read.
int usableCpus();
// Whether this host runs more ranks (localRanks) than the CPUs this process may use: a pause spin
// helps only when every rank of the host can run at once.
bool oversubscribed(int localRanks);
// Whether the calling thread may run on one CPU only (a rank bound to a CPU of its own, or two
// ranks to one): its threads then take turns on that CPU, and none runs while another waits.
bool boundToOneCpu();
// Whether waiting threads drive the engine under HORA_CALLER_DRIVES=auto: while the host runs at
// most two ranks per CPU online, however they are bound. Up to there a driving waiter saves the
// hand-off between a rank's two threads, which costs more than the CPU it takes from the other
// ranks (4 ranks on 2 CPUs: a 4 B allreduce in half the time); beyond it, the waiter mostly
// gives up its poll before its peers come (8 ranks on 2 CPUs: slower than the hand-off).
bool callerDrivesByDefault(int localRanks);
// Whether a rank publishes a small allreduce's data with its agreement round under
// HORA_AGREEMENT_PAYLOADS=auto (core/coordinator/local_agreement.h): within the bound of
// callerDrivesByDefault, where it was measured to save the exchange's wait (3 and 4 ranks on 2
// CPUs: a 4 B allreduce 10-25% faster; 2 ranks a little faster); beyond it, not measured.
bool payloadsByDefault(int localRanks);

// Makes the calling thread's timed sleeps end on time (Linux timer slack of 1 us instead of the
// default 50 us): the background thread's short back-off sleeps stay short.
void requestPreciseSleeps();

}  // namespace hora
