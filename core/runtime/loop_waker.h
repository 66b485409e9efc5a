#pragma once
// LoopWaker: wakes the background loop from frontend threads, and keeps the control channel
// alive while a wake-up uses it.
//
// Threads: wake() and running() from any thread; open(), cycleStart() and close() from the
// thread that owns the loop. mu_ guards running_ and channel_, so that wake() never touches a
// channel the background thread has torn down (close()).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "core/transport/control_channel.h"

namespace hora {

class LoopWaker {
 public:
  // The loop runs from here on; wake-ups go to `channel` until close().
  void open(ControlChannel* channel);
  // Asks the loop for a cycle. A wake-up asked since the loop's last cycleStart() is still ahead
  // of it, and that cycle reads everything published before this call: no second one is sent.
  void wake();
  // Background thread, before a cycle reads what frontend threads published.
  void cycleStart() { pending_.exchange(false, std::memory_order_acq_rel); }
  // Background thread: sleeps until a wake-up is asked for (one pending since the last
  // cycleStart() included) or `timeout` passes.
  void park(Millis timeout);
  // The loop ended: under the lock, no wake-up reaches the channel any more, and `release`
  // (which may destroy it) runs.
  void close(const std::function<void()>& release);

  bool running() const;
  // Every wake() so far, those that found a wake-up still pending included.
  uint64_t asked() const { return asked_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  bool running_ = false;               // guarded by mu_
  ControlChannel* channel_ = nullptr;  // guarded by mu_
  bool parked_ = false;                // guarded by mu_: the loop sleeps in park()
  std::condition_variable unpark_;
  // A wake-up was asked for since the loop's last cycle start.
  std::atomic<bool> pending_{false};
  std::atomic<uint64_t> asked_{0};
};

}  // namespace hora
