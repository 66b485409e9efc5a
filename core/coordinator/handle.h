#pragma once
// Handle: the completion of one enqueued tensor operation.
//
// Contract:
// - Created by Runtime::enqueue, completed exactly once by the background thread with either
//   success (results filled in first) or an exception_ptr. Never throws across threads: the
//   caller's thread rethrows via rethrowIfFailed().
// - poll(), wait(), error() are thread-safe. wait() polls for at most the spin budget (yielding the
//   core; see core/common/spin.h), then blocks on a condition variable. The budget is fixed, or
//   comes from an AdaptiveSpin shared by the runtime's handles, which each wait informs.
// - With a WaitDriver (core/coordinator/wait_driver.h), each poll of the spin phase first offers
//   to drive the runtime, so that the waiting thread may run its own collective; the driver hears
//   when the spin begins and ends (arrive(), depart()).
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/common/adaptive_spin.h"
#include "core/common/tensor.h"
#include "core/common/time.h"
#include "core/coordinator/wait_driver.h"

namespace hora {

class Handle {
 public:
  explicit Handle(Micros spin = Micros(0), std::shared_ptr<WaitDriver> driver = nullptr)
      : spin_(spin), driver_(std::move(driver)) {}
  explicit Handle(std::shared_ptr<AdaptiveSpin> spin, std::shared_ptr<WaitDriver> driver = nullptr)
      : spin_(spin->full()), adaptive_(std::move(spin)), driver_(std::move(driver)) {}

  bool poll() const;
  // Whether a waiting thread may drive the runtime's work for this handle (it has a WaitDriver).
  bool driven() const { return driver_ != nullptr; }
  // True when done; false when the timeout passed first. nullopt waits without limit.
  bool wait(std::optional<Millis> timeout) const;
  std::exception_ptr error() const;
  void rethrowIfFailed() const;

  // Results, valid once done without error.
  OutputTensor output;                  // allgather, alltoall, reducescatter
  std::vector<int32_t> receivedSplits;  // alltoall: rows received from each rank
  int lastJoinedRank = -1;              // join
  int processSetId = -1;                // add-process-set

  // Background thread only.
  void complete(std::exception_ptr error);

 private:
  const Micros spin_;
  const std::shared_ptr<AdaptiveSpin> adaptive_;  // null: always spin_
  const std::shared_ptr<WaitDriver> driver_;      // null: the spin only polls
  // Set once, under mu_ (for the waits on cv_), after the results and error_; read without it.
  std::atomic<bool> finished_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::exception_ptr error_;
};

}  // namespace hora
