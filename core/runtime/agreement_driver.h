#pragma once
// AgreementDriver: the background loop's side of local agreement
// (core/coordinator/local_agreement.h): which cache hits it holds instead of sending them, the
// plan that runs what every rank agreed on, and the batch that hands the rest to the coordinator.
// Without a LocalAgreement (not every rank on one host, or turned off) every call is a no-op and
// every tensor goes to the coordinator.
//
// Background thread only (or a waiting thread under the loop's drive lock, background_loop.h).
// The loop sequences the calls: it sends the hand-over batches and runs the planned responses
// itself.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/coordinator/coordinator.h"
#include "core/coordinator/local_agreement.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/tensor_queue.h"
#include "core/timeline/timeline.h"

namespace hora {

class AgreementDriver {
 public:
  // coordinator: world rank 0's, else null. fusionThreshold: rank 0's, for what runs agreed.
  // publishesData: a small allreduce held alone goes with its data (LocalAgreement::hold).
  AgreementDriver(std::unique_ptr<LocalAgreement> agreement, int64_t fusionThreshold, int worldSize,
                  bool publishesData, Participant& participant, Coordinator* coordinator,
                  Timeline& timeline);

  bool enabled() const { return agreement_ != nullptr; }
  LocalAgreement& agreement() { return *agreement_; }  // enabled() only
  const LocalAgreement& agreement() const { return *agreement_; }

  // Tensors sent for negotiation that only the coordinator can answer (not held here).
  size_t awaitingCoordinator() const;
  // A tensor completed (or failed) on this rank.
  void finished(const std::string& key);
  void setJoined(bool joined);
  // A batch's evicted cache slots: held ones are let go.
  void evicted(const std::vector<int32_t>& slots);
  void paused(Clock::duration busy);

  // Cache hits of the global set stay here to be agreed on; the rest of `batch` goes on. A join
  // going out is published too: the other ranks then stop holding what this rank will not submit.
  // A small allreduce's data (from `queue`) goes with its round when it is held alone.
  void hold(RequestBatch& batch, Clock::time_point now, TensorQueue& queue);
  // What every rank holds runs as the coordinator would have answered it: the cached responses,
  // in slot order, fused under rank 0's threshold. Valid until the next plan().
  const std::vector<Response>& plan(const std::vector<int>& slots);
  // Slots that waited too long, or that another rank handed over, go to the coordinator as the
  // cache bits they would have been; the caller sets the wait state and sends it.
  RequestBatch handOverBatch(const std::vector<int>& slots);

 private:
  bool recording() const { return coordinator_ != nullptr && timeline_.enabled(); }
  // What the tensor cached in `slot` may publish with its round (EagerPayload).
  EagerPayload eagerData(const Response& cached, int slot, TensorQueue& queue) const;

  std::unique_ptr<LocalAgreement> agreement_;
  int64_t fusionThreshold_;
  int worldSize_;
  bool publishesData_;
  Participant& participant_;
  Coordinator* coordinator_;
  Timeline& timeline_;
  // The last plan. A lone slot (a blocking call's round) is copied into what it held before,
  // which reuses its allocations.
  std::vector<Response> planned_;
  std::vector<const Response*> singles_;  // scratch of plan()
};

}  // namespace hora
