#pragma once
// ShutdownSequence: how the background loop ends. A frontend asks for a shutdown (request());
// the loop then tells the coordinator once (start()) and waits at most kAckTimeout for its
// answer; the coordinator's shutdown batch, or a failure, stops the loop (stop()).
//
// Threads: request() and requested() from any thread; everything else from the background thread
// only.
#include <atomic>
#include <string>

#include "core/common/time.h"

namespace hora {

class ShutdownSequence {
 public:
  // How long a rank that asked to shut down waits for the coordinator to acknowledge.
  static constexpr Millis kAckTimeout{10000};

  void request() { requested_.store(true, std::memory_order_release); }
  bool requested() const { return requested_.load(std::memory_order_acquire); }

  // True once, in the first cycle after request(): the shutdown must be sent now.
  bool start(Clock::time_point now);
  // Whether the loop gave up waiting for the acknowledgement (it stops then); otherwise the
  // loop's poll timeout `wait` (-1: none) bounded by what is left of that wait.
  bool expired(Clock::time_point now, Millis* wait);

  // Leave the loop; reason: the coordinator's, empty when this rank ended it.
  void stop(const std::string& reason = std::string());
  bool stopped() const { return stopped_; }
  // The message every pending handle fails with after a clean stop.
  std::string cleanStopMessage() const;

 private:
  std::atomic<bool> requested_{false};
  bool sent_ = false;
  Clock::time_point deadline_{};
  bool stopped_ = false;
  std::string reason_;  // why the coordinator ended the job
};

}  // namespace hora
