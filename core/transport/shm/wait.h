#pragma once
// Waiting on shared memory in three bounded stages, so a wait costs little when the peer is
// about to answer and nothing when it is not:
//   1. spin with a pause instruction for `pause` (skipped when this host runs more ranks than the
//      process may use CPUs: a spinning rank would only delay the peer it waits for);
//   2. sched_yield between checks for `yield` (other runnable threads on this core go first);
//   3. sleep in FUTEX_WAIT on the rank's doorbell word, in slices of kSliceMs, until the
//      condition holds, `timeout` passes (-> false), or `failed()` returns a reason (-> throws the
//      IoError it built).
// Publishers bump the doorbell and call FUTEX_WAKE only when the sleepers counter says someone is
// asleep (ring()), so a wait that ends in stages 1-2 costs the publisher one atomic add.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "core/common/time.h"
#include "core/transport/shm/segment.h"

namespace hora {
namespace shm {

struct WaitPolicy {
  Micros pause{2};
  Micros yield{50};
  Millis timeout{60000};
};

// Wakes the rank whose doorbell this is (after the caller published what it waits for).
void ring(Doorbell& d);

// Blocks until ready() (true) or the policy's timeout (false). failed() is checked after the
// spin stages and once per sleep slice; a non-empty reason ends the wait with IoError(reason).
bool waitUntil(Doorbell& mine, const WaitPolicy& policy, const std::function<bool()>& ready,
               const std::function<std::string()>& failed);

}  // namespace shm
}  // namespace hora
