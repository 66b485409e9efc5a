#pragma once
// ResponseApplier: carries out the coordinator's responses on this rank: collectives on tensors
// (through core/ops, or the GPU executor for device tensors), barriers, errors, joins and
// process-set changes, and completes the tensors' handles.
//
// Background thread only (or a waiting thread under the loop's drive lock, background_loop.h;
// never GPU work). It owns the fusion buffer and the GPU executor (made by the first
// response on GPU tensors); the queue, process sets, participant and timeline are the runtime's,
// shared with the rest of the loop.
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/common/settings.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_buffer.h"
#include "core/ops/gpu_executor.h"
#include "core/runtime.h"
#include "core/runtime/agreement_driver.h"
#include "core/runtime/world_links.h"
#include "core/timeline/timeline.h"

namespace hora {

class ResponseApplier {
 public:
  struct Parts {
    const Topology& topology;
    const Settings& settings;
    WorldLinks& links;
    ProcessSetTable& sets;
    TensorQueue& queue;
    Participant& participant;
    AgreementDriver& agreement;
    Timeline& timeline;
  };
  explicit ResponseApplier(Parts parts) : p_(parts) {}

  void apply(const Response& r);
  // A collective on tensors; a response this rank has no part in is skipped. payloads: every
  // rank's data for it, from the agreement round (OpContext::payloads), or null.
  void runData(const Response& r, const std::vector<const uint8_t*>* payloads = nullptr);

  // Whether a response ever ran on GPU tensors here.
  bool usesGpu() const { return gpu_ != nullptr; }
  // GPU work in flight: the loop polls it for completion.
  bool gpuBusy() const { return gpu_ && gpu_->busy(); }
  void progressGpu(Clock::time_point now) {
    if (gpu_) gpu_->progress(now);
  }
  // The loop stopped: GPU work finishes (clean stop) or is aborted (failure); either way every
  // handle it holds fails with `error`.
  void stopGpu(std::exception_ptr error, bool failure);

 private:
  void applyControl(const Response& r);  // errors, join, barrier, process-set changes
  void runBarrier(const Response& r);
  // Records the single response of r's i-th tensor in the participant's cache when rank 0
  // assigned it a slot (a full response, not a hit rebuilt from the cache).
  void remember(const Response& r, size_t i, const std::string& key, const Request& request,
                int setSize);
  bool onGpu(const Response& r, const std::vector<std::unique_ptr<TensorEntry>>& owned) const;
  void runOnGpu(const Response& r, Communicator* comm,
                std::vector<std::unique_ptr<TensorEntry>> owned);
  void applyProcessSetChange(const Response& r, TensorEntry* entry);
  void completeNamed(const Response& r, std::exception_ptr error);
  void finishedKey(const std::string& key);

  Parts p_;
  FusionBuffer fusion_;
  std::unique_ptr<GpuExecutor> gpu_;
  Response cachedScratch_;  // remember: a tensor's single response, before it is cached
  // runData's vectors, kept for their buffers; empty between calls.
  std::vector<std::unique_ptr<TensorEntry>> owned_;
  std::vector<TensorEntry*> entries_;
};

}  // namespace hora
