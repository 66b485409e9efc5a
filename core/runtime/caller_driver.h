#pragma once
// CallerDriver: the WaitDriver (core/coordinator/wait_driver.h) the runtime gives its handles
// when waiting threads may run the loop's work (HORA_CALLER_DRIVES). Handles may outlive the
// loop, so they hold this instead of the loop: detach() cuts the link before the loop is
// destroyed, and a tryDrive() after it does nothing.
//
// Threads: tryDrive() and stoppedDriving() from any waiting thread (tryDrive() try-locks only);
// detach() from the runtime's owner, once the loop's thread has ended. mu_ guards loop_.
#include <mutex>

#include "core/coordinator/wait_driver.h"
#include "core/runtime/background_loop.h"

namespace hora {

class CallerDriver final : public WaitDriver {
 public:
  explicit CallerDriver(BackgroundLoop* loop) : loop_(loop) {}

  void arrive() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (loop_ != nullptr) loop_->callerArrived();
  }
  bool tryDrive() override {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    return lock.owns_lock() && loop_ != nullptr && loop_->tryDrive();
  }
  // Waits for another caller's cycle at most (bounded like the loop's own): the wake-up must not
  // be lost, and this thread sleeps next anyway.
  void depart(bool finished) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (loop_ != nullptr) loop_->callerDeparted(finished);
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mu_);
    loop_ = nullptr;
  }

 private:
  std::mutex mu_;
  BackgroundLoop* loop_;  // guarded by mu_; null once detached
};

}  // namespace hora
