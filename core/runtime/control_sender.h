#pragma once
// ControlSender: every control message the background loop sends, counted (counters()), and the
// heartbeats of core/coordinator/liveness.h.
//
// World rank 0 (the coordinator) sends ResponseBatches to the workers; a worker sends
// RequestBatches to rank 0. Rank 0 closes its end as soon as it has told every rank to stop, so a
// worker's send can fail while that news waits unread: toCoordinator() then hands what already
// arrived to `applyArrived` and rethrows only when that did not stop this rank (a shutdown is no
// failure).
//
// Threads: the background thread only, but for sent(), which any thread may read. The channel
// must outlive every call (the loop releases it after its last one).
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "core/coordinator/codec.h"
#include "core/transport/control_channel.h"

namespace hora {

class ControlSender {
 public:
  // Applies a ResponseBatch that arrived while a send failed; returns true when it stopped the
  // loop.
  using ApplyArrived = std::function<bool(const ResponseBatch&)>;

  ControlSender(ControlChannel& channel, ApplyArrived applyArrived);

  void send(int to, const std::string& bytes);
  // Rank 0: the same bytes to every other rank. bestEffort: a rank that is gone is skipped.
  void toWorkers(const std::string& bytes, bool bestEffort = false);
  // A worker's batch to rank 0 (see above).
  void toCoordinator(const RequestBatch& batch);

  // A heartbeat batch carries nothing else: returns true when `kind` was one (hearing it was the
  // point), answering a ping with a pong.
  bool answerHeartbeat(int from, Heartbeat kind, uint64_t applied);
  // applied: a worker's applied-batch count, which every batch to rank 0 carries.
  void heartbeat(int peer, Heartbeat kind, uint64_t applied);

  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }

 private:
  ControlChannel* channel_;
  ApplyArrived applyArrived_;
  bool coordinator_;  // world rank 0
  std::atomic<uint64_t> sent_{0};
};

}  // namespace hora
