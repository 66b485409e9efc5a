#pragma once
// BackgroundLoop: the one background thread of a rank. It only sequences the parts of a cycle:
// take newly enqueued tensors, send them for negotiation (or hold cache hits for local
// agreement), let rank 0's coordinator build batches, run what was agreed, watch peers and
// stalls, poll the control channel, apply what arrived, and tear down on shutdown or failure.
//
// Who owns what (threads, locks):
// - run() is the background thread's body; every method but requestShutdown(), controlSent(),
//   tryDrive(), callerLeft() and callerOps() runs on it, or on a waiting thread that holds the
//   drive lock (below). It owns the participant, the coordinator and stall watch (world rank 0),
//   the control sender, the peer watch, the shutdown sequence, local agreement and the response
//   applier (fusion buffer, GPU executor).
// - The runtime's shared parts (Parts) are used by the frontends too: the tensor queue and the
//   process-set table are thread-safe; WaitState and LoopWaker keep their own atomics and lock;
//   TunedSettings its lock. The links' communicators and control channel are the loop's alone
//   (the communicators also a driving caller's, under the drive lock; the control channel the
//   background thread's only) until it releases them at the end of run(), under LoopWaker's lock.
// - Errors never leave run(): a failure ends the loop, fails every pending handle with a
//   ShutdownError naming it, and tells the other ranks (from rank 0) so that they stop at once.
//
// The drive lock (drive_) and callers that drive (tryDrive(), HORA_CALLER_DRIVES):
// - Every method that touches the loop's state runs under drive_. The background thread holds
//   it for its whole cycle except the blocking poll of the control channel in listen(), and
//   through stop(); the loop's state is then the lock holder's, whichever thread that is.
// - A frontend thread waiting on a handle calls tryDrive(). It only try_locks drive_ (it never
//   blocks), and with it runs a caller cycle: take fresh tensors, hold the cache hits for local
//   agreement, one local-agreement step, and the agreed rounds that step resolved. It sends
//   nothing on the control channel: requests, hand-overs and wait reports are left in deferred_
//   for the background thread, which it wakes. Nothing that only the background thread does
//   (coordinator batches, peer checks, shutdown, GPU work) runs on a caller. A caller that stops
//   driving before its handle completed wakes the loop (callerLeft()): the timers of what it
//   left (slots held, a round open) were unknown to the loop's poll.
// - A caller cycle's failure is kept (callerError_) and rethrown by the background thread's
//   next cycle, so the loop stops as for its own failures and callers only see it through their
//   handles.
// - Parking (mayPark()): while a caller polls (callerArrived() to callerDeparted()), and for
//   kCallerGap after the last one left when the loop has no round or hits of its own, the
//   background thread sleeps in LoopWaker::park() instead of the control channel's poll, whose
//   wake-ups (another rank's round) would only bring a second thread to the caller's work. The
//   cycle's own timers do not end a park (callers run that part of the cycle); any wake() does:
//   an enqueue without a waiting caller, work a caller deferred, a caller that left work behind
//   or stopped polling before its result; so do the loop's checks (peers, stalls) and the end of
//   kParkSlice. A loop that parked in the gap between two blocking calls may so sleep on through
//   the next ones: its cycle's timers (joining another rank's round empty-handed) are then late
//   by up to the slice once its caller stops calling.
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
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
  // Any thread; never blocks. Runs one caller cycle when no other thread drives the loop, local
  // agreement is on and the loop runs no GPU work. True when it ran one.
  bool tryDrive();
  // Any thread: a caller begins to poll its handle (tryDrive() calls follow), and stops polling
  // (finished: its handle completed; otherwise it sleeps next).
  void callerArrived() { callersPresent_.fetch_add(1, std::memory_order_acq_rel); }
  void callerDeparted(bool finished);
  // Collectives that callers ran (tryDrive()).
  uint64_t callerOps() const { return callerOps_.load(std::memory_order_relaxed); }
  uint64_t foldedOps() const { return foldedOps_.load(std::memory_order_relaxed); }
  uint64_t agreedRounds() const { return agreedRounds_.load(std::memory_order_relaxed); }
  uint64_t cycles() const { return cycles_.load(std::memory_order_relaxed); }

 private:
  void cycle();
  void callerCycle();
  bool callerMayDrive() const;
  void takeFresh();
  Clock::duration currentCycleTime() const;
  bool hasFresh() const { return !fresh_.empty() || participant_.hasResends(); }
  bool collectDue(Clock::time_point now, Clock::duration cycleTime) const;
  RequestBatch collectFresh(Clock::time_point now);
  void sendDeferred(Clock::time_point now);
  bool startShutdown(Clock::time_point now);
  bool coordinate(Clock::time_point now);
  bool agree(Clock::time_point now, Millis cycle, Millis* wait);
  void listen(Clock::time_point now, Millis wait);
  bool mayPark(Clock::time_point now) const;
  void send(RequestBatch& batch, Clock::time_point now);
  void reportWaiting();
  void applyBatch(const ResponseBatch& batch);
  void takeAgreed(const LocalAgreement::Outcome& outcome);
  size_t runAgreed(const LocalAgreement::Outcome& outcome);
  size_t runRound(const std::vector<int>& slots, const std::vector<const uint8_t*>& payloads);
  void checkPeers(Clock::time_point now);
  std::vector<int> watchedPeers();
  Millis untilChecks(Clock::time_point now);
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
  std::vector<std::string> taken_;  // the last take from the queue (takeFresh)
  Clock::time_point lastSend_{};
  double cycleTimeMs_;  // the cycle time in force (autotune may change it)
  // This thread and the callers take turns on one CPU (listen() lets a submitting caller go on).
  const bool oneCpu_;

  std::mutex drive_;                      // the drive lock (see the top of this file)
  std::unique_lock<std::mutex> driving_;  // the background thread's hold of drive_
  bool ended_ = false;                    // run() is stopping: no caller cycle any more
  std::vector<RequestBatch> deferred_;    // for the coordinator, left by a caller cycle
  std::exception_ptr callerError_;        // a caller cycle's failure, for the loop to stop on
  std::atomic<uint64_t> callerOps_{0};
  std::atomic<uint64_t> foldedOps_{0};
  std::atomic<uint64_t> agreedRounds_{0};
  std::atomic<uint64_t> cycles_{0};           // cycles the background thread began
  std::atomic<int> callersPresent_{0};        // threads polling a handle they may drive
  std::atomic<Clock::rep> lastDeparture_{0};  // when a caller last stopped polling (Clock ticks)
  // The last caller cycle left work that no caller may step (a round open, hits held, tensors
  // taken): a departing caller then wakes the parked loop.
  std::atomic<bool> workLeft_{false};
};

}  // namespace hora
