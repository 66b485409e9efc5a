#pragma once
// BackgroundLoop: the one background thread of a rank. It only sequences the parts of a cycle:
// take newly enqueued tensors, send them for negotiation (or hold cache hits for local
// agreement), let rank 0's coordinator build batches, run what was agreed, watch peers and
// stalls, poll the control channel, apply what arrived, and tear down on shutdown or failure.
//
// Who owns what (threads, locks):
// - run() is the background thread's body; every method but requestShutdown() and controlSent()
//   runs on it. It owns the participant, the coordinator and stall watch (world rank 0), the
//   control sender, the peer watch, the shutdown sequence, local agreement and the response
//   applier (fusion buffer, GPU executor).
// - The runtime's shared parts (Parts) are used by the frontends too: the tensor queue and the
//   process-set table are thread-safe; WaitState and LoopWaker keep their own atomics and lock;
//   TunedSettings its lock. The links' communicators and control channel are the loop's alone
//   until it releases them at the end of run(), under LoopWaker's lock.
// - Errors never leave run(): a failure ends the loop, fails every pending handle with a
//   ShutdownError naming it, and tells the other ranks (from rank 0) so that they stop at once.
#include <memory>
#include <string>
#include <vector>

#include "core/common/settings.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/tensor_queue.h"
#include "core/runtime.h"
#include "core/runtime/agreement_driver.h"
#include "core/runtime/control_sender.h"
#include "core/runtime/loop_waker.h"
#include "core/runtime/peer_watch.h"
#include "core/runtime/response_applier.h"
#include "core/runtime/shutdown_sequence.h"
#include "core/runtime/stall_watch.h"
#include "core/runtime/tuned_settings.h"
#include "core/runtime/wait_state.h"
#include "core/runtime/world_links.h"
#include "core/timeline/timeline.h"

namespace hora {

class BackgroundLoop {
 public:
  struct Parts {
    const Topology& topology;
    const Settings& settings;
    WorldLinks& links;
    ProcessSetTable& sets;
    TensorQueue& queue;
    Timeline& timeline;
    WaitState& waits;
    LoopWaker& waker;
    TunedSettings& tuned;
  };
  // staticSets: how many process sets init was given (the coordinator numbers later ones after).
  BackgroundLoop(Parts parts, int staticSets);

  void run();
  // Any thread.
  void requestShutdown() { shutdown_.request(); }
  uint64_t controlSent() const { return sender_.sent(); }

 private:
  void cycle();
  void takeFresh();
  bool startShutdown(Clock::time_point now);
  bool coordinate(Clock::time_point now);
  bool agree(Clock::time_point now, Millis cycle, Millis* wait);
  void listen(Clock::time_point now, Millis wait);
  void sendRequests(Clock::time_point now);
  void send(RequestBatch& batch, Clock::time_point now);
  void reportWaiting();
  void applyBatch(const ResponseBatch& batch);
  void takeAgreed(const LocalAgreement::Outcome& outcome);
  void runAgreed(const std::vector<int>& slots);
  void checkPeers(Clock::time_point now);
  std::vector<int> watchedPeers();
  Millis pollTimeout(Millis forSending, Clock::time_point now);
  void stop(const std::string& reason, bool failure);

  Parts p_;
  Participant participant_;
  std::unique_ptr<Coordinator> coordinator_;  // world rank 0 only
  std::unique_ptr<StallWatch> stalls_;        // world rank 0 only
  ControlSender sender_;
  PeerWatch peers_;
  ShutdownSequence shutdown_;
  AgreementDriver agreement_;
  ResponseApplier applier_;
  std::vector<std::string> fresh_;  // enqueued, not yet sent
  Clock::time_point lastSend_{};
  double cycleTimeMs_;  // the cycle time in force (autotune may change it)
};

}  // namespace hora
