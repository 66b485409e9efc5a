#pragma once
// RuntimeImpl: the Runtime behind runtime.h. runtime.cc holds start-up and the frontend-facing
// methods; runtime_loop.cc holds the background thread (negotiate, execute, tear down).
//
// Threads: frontends call enqueue()/process-set queries from any thread; one background thread
// owns the participant, the coordinator (rank 0), the communicators and the fusion buffer.
// mu_ guards `running_` and the control channel's lifetime, so that wakeup() never touches a
// channel the background thread has torn down. settings_ never changes after construction; the
// values autotune changes live in cycleTimeMs_ (loop only) and are published to tuned_ under
// tunedMu_ for settings().
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/adaptive_spin.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/liveness.h"
#include "core/coordinator/local_agreement.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/stall_inspector.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_buffer.h"
#include "core/ops/gpu_executor.h"
#include "core/runtime.h"
#include "core/store/store.h"
#include "core/store/tcp_store.h"
#include "core/timeline/timeline.h"
#include "core/transport/transport.h"

namespace hora {

class RuntimeImpl final : public Runtime {
 public:
  explicit RuntimeImpl(const RuntimeOptions& options);
  ~RuntimeImpl() override;

  void shutdown() override;
  bool running() const override;
  const Topology& topology() const override { return topology_; }
  Settings settings() const override;
  std::vector<std::shared_ptr<Handle>> enqueue(std::vector<OpRequest> requests) override;
  std::shared_ptr<Handle> addProcessSet(const std::vector<int>& ranks,
                                        const std::string& callSite) override;
  std::shared_ptr<Handle> removeProcessSet(int id, const std::string& callSite) override;
  void waitBegin() override;
  void waitEnd() override;
  std::vector<int> processSetRanks(int id) const override { return sets_.ranks(id); }
  std::vector<int> processSetIds() const override { return sets_.ids(); }
  std::string transportName() const override { return transportName_; }
  void startTimeline(const std::string& path, bool markCycles) override;
  void stopTimeline() override { timeline_.stop(); }
  EngineCounters counters() const override;
  std::shared_ptr<SharedPool> sharedPool() const override { return sharedPool_; }

 private:
  // runtime.cc
  void connect(const RuntimeOptions& options);
  std::string openStore(const RuntimeOptions& options, bool usesTcp, bool usesMpi,
                        ConnectOptions& co);
  void addStaticProcessSets(const std::vector<std::vector<int>>& sets);
  std::shared_ptr<Handle> enqueueControl(OpKind kind, const std::string& name,
                                         ProcessSetChange change, const std::string& callSite);
  void wakeLoop();

  // runtime_loop.cc
  void loop();
  void cycle();
  void sendRequests(Clock::time_point now);
  void reportWaiting();
  void applyBatch(const ResponseBatch& batch);
  void applyResponse(const Response& r);
  void applyControl(const Response& r);  // errors, join, barrier, process-set changes
  void runBarrier(const Response& r);
  void runData(const Response& r);  // collectives on tensors, through core/ops
  bool onGpu(const Response& r, const std::vector<std::unique_ptr<TensorEntry>>& owned) const;
  void applyProcessSetChange(const Response& r, TensorEntry* entry);
  void completeNamed(const Response& r, std::exception_ptr error);
  void stop(const std::string& reason, bool failure);
  Millis pollTimeout(Millis forSending, Clock::time_point now);
  void checkLiveness(Clock::time_point now);
  bool answeredHeartbeat(int from, Heartbeat kind);
  void sendHeartbeat(int peer, Heartbeat kind);
  void sendToCoordinator(const RequestBatch& b);
  void sendControl(int to, const std::string& bytes);  // every control message, counted
  void inspectStalls(Clock::time_point now);
  // Local agreement (core/coordinator/local_agreement.h), when agreement_ is set.
  void holdAgreeable(RequestBatch& batch, Clock::time_point now);
  // True when it handed tensors to the coordinator.
  bool agreeLocally(Clock::time_point now, Millis cycle);
  void takeAgreed(const LocalAgreement::Outcome& outcome);
  void runAgreed(const std::vector<int>& slots);
  void handOver(const std::vector<int>& slots);
  // Tensors sent for negotiation that only the coordinator can answer (not held for agreement).
  size_t awaitingCoordinator() const;
  void finishedKey(const std::string& key);

  Topology topology_;
  const Settings settings_;  // as given at start
  double cycleTimeMs_;       // background thread: the cycle time in force
  mutable std::mutex tunedMu_;
  TunedParams tuned_;  // guarded by tunedMu_: what settings() reports
  std::string transportName_;
  ConnectOptions connectOptions_;  // as the world connected (the hierarchical path reuses them)
  std::unique_ptr<TcpStoreServer> storeServer_;  // rank 0, when the store was bootstrapped
  std::unique_ptr<Store> baseStore_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Communicator> world_;
  std::shared_ptr<SharedPool> sharedPool_;  // world_'s, kept from connect() on
  Capabilities dataCapabilities_;           // world_'s, read by enqueue() on the caller's thread
  std::unique_ptr<ControlChannel> control_;
  ProcessSetTable sets_;
  TensorQueue queue_;
  Participant participant_;
  Liveness liveness_;  // background thread: peers this rank waits for that went silent
  Timeline timeline_;  // recorded on world rank 0 only
  std::unique_ptr<Coordinator> coordinator_;  // world rank 0 only
  std::unique_ptr<StallInspector> stalls_;    // world rank 0 only
  FusionBuffer fusion_;
  std::unique_ptr<GpuExecutor> gpu_;           // made by the first response on GPU tensors
  std::unique_ptr<LocalAgreement> agreement_;  // null: every tensor goes to the coordinator
  int64_t agreedFusionThreshold_ = 0;          // rank 0's, for what agreement_ runs

  std::vector<std::string> fresh_;  // enqueued, not yet sent
  Response cachedScratch_;          // runData: a tensor's single response, before it is cached
  Clock::time_point lastSend_{};
  bool waitingNow_ = false;       // background thread: read at the start of each cycle
  bool reportedWaiting_ = false;  // the wait state last sent to the coordinator
  uint64_t reportedApplied_ = 0;  // and the applied-batch count sent with it
  bool stopped_ = false;          // background thread: leave the loop
  std::string stopReason_;        // why the coordinator ended the job
  bool shutdownSent_ = false;
  Clock::time_point shutdownDeadline_{};
  // Both checks walk every pending tensor: they run on a period, not on every cycle.
  Clock::time_point livenessCheckAt_{};  // next look for silent peers
  Clock::time_point deadlockCheckAt_{};  // rank 0: next look for deadlocks

  mutable std::mutex mu_;
  bool running_ = false;
  std::atomic<bool> shutdownRequested_{false};
  std::atomic<int> controlCounter_{0};  // names of add/remove-process-set calls
  std::atomic<int> waiters_{0};         // frontend threads blocked in a wait without timeout
  // A wake-up was asked for since the loop's last cycle start (wakeLoop()).
  std::atomic<bool> wakePending_{false};
  // The loop may count a wait as blocked, now or in its current cycle: the end of one must wake it.
  std::atomic<bool> waitWatched_{false};
  std::atomic<uint64_t> controlSent_{0};
  std::atomic<uint64_t> loopWakeups_{0};
  std::atomic<uint64_t> waitEndReports_{0};
  // The callers' polling in Handle::wait, shared by every handle; null: a fixed spin.
  std::shared_ptr<AdaptiveSpin> handleSpin_;
  std::thread thread_;
};

}  // namespace hora
