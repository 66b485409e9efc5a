#pragma once
// RuntimeImpl: the Runtime behind runtime.h. runtime.cc holds start-up and the frontend-facing
// methods; the background loop and its parts live in core/runtime/ (background_loop.h says who
// owns what).
//
// Threads: frontends call enqueue(), the wait hooks and process-set queries from any thread; one
// background thread (loop_) owns the coordination state. What both sides touch is thread-safe on
// its own: the tensor queue and the process-set table lock internally, WaitState and LoopWaker
// keep their atomics and lock (LoopWaker's guards the control channel's lifetime, so that a
// wake-up never touches a channel the loop has torn down), TunedSettings holds the values
// autotune changes for settings(). settings_ never changes after construction.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/common/adaptive_spin.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/tensor_queue.h"
#include "core/runtime.h"
#include "core/runtime/background_loop.h"
#include "core/runtime/caller_driver.h"
#include "core/runtime/loop_waker.h"
#include "core/runtime/tuned_settings.h"
#include "core/runtime/wait_state.h"
#include "core/runtime/world_links.h"
#include "core/timeline/timeline.h"

namespace hora {

class RuntimeImpl final : public Runtime {
 public:
  explicit RuntimeImpl(const RuntimeOptions& options);
  ~RuntimeImpl() override;

  void shutdown() override;
  bool running() const override { return waker_.running(); }
  const Topology& topology() const override { return topology_; }
  Settings settings() const override { return tuned_.applyTo(settings_); }
  using Runtime::enqueue;
  std::vector<std::shared_ptr<Handle>> enqueue(std::vector<OpRequest> requests,
                                               bool callerWaits) override;
  std::shared_ptr<Handle> addProcessSet(const std::vector<int>& ranks,
                                        const std::string& callSite) override;
  std::shared_ptr<Handle> removeProcessSet(int id, const std::string& callSite) override;
  void waitBegin(bool driven) override;
  void waitEnd() override;
  std::vector<int> processSetRanks(int id) const override { return sets_.ranks(id); }
  std::vector<int> processSetIds() const override { return sets_.ids(); }
  std::string transportName() const override { return links_.transportName; }
  void startTimeline(const std::string& path, bool markCycles) override;
  void stopTimeline() override { timeline_.stop(); }
  EngineCounters counters() const override;
  std::shared_ptr<SharedPool> sharedPool() const override { return links_.sharedPool; }

 private:
  std::shared_ptr<Handle> enqueueControl(OpKind kind, const std::string& name,
                                         ProcessSetChange change, const std::string& callSite);
  void wakeLoop() { waker_.wake(); }

  Topology topology_;
  const Settings settings_;  // as given at start
  TunedSettings tuned_;      // what autotune changed since
  WorldLinks links_;         // connected at start; the loop releases them when it stops
  ProcessSetTable sets_;
  TensorQueue queue_;
  Timeline timeline_;  // recorded on world rank 0 only
  WaitState waits_;
  LoopWaker waker_;
  std::atomic<int> controlCounter_{0};  // names of add/remove-process-set calls
  // The callers' polling in Handle::wait, shared by every handle; null: a fixed spin.
  std::shared_ptr<AdaptiveSpin> handleSpin_;
  std::unique_ptr<BackgroundLoop> loop_;
  // Given to the handles of CPU tensors when waiting threads may drive the loop; null: never.
  std::shared_ptr<CallerDriver> callerDriver_;
  std::thread thread_;
};

}  // namespace hora
