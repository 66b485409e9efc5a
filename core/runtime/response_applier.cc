#include "core/runtime/response_applier.h"

#include <algorithm>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/fusion/fusion_planner.h"
#include "core/ops/executor.h"
#include "core/transport/hierarchical_communicator.h"

namespace hora {

void ResponseApplier::apply(const Response& r) {
  if (isDataOp(r.kind)) {
    runData(r);
  } else {
    applyControl(r);
  }
}

void ResponseApplier::finishedKey(const std::string& key) {
  p_.participant.finished(key);
  p_.agreement.finished(key);
}

void ResponseApplier::completeNamed(const Response& r, std::exception_ptr error) {
  for (const auto& name : r.names) {
    auto entry = p_.queue.remove(tensorKey(r.processSetId, name));
    if (!entry) continue;
    finishedKey(tensorKey(r.processSetId, name));
    entry->handle->complete(error);
  }
}

// Responses without tensors: the runtime handles them itself, no op function involved.
void ResponseApplier::applyControl(const Response& r) {
  switch (r.kind) {
    case OpKind::Error:
      completeNamed(r, r.errorCode == ResponseError::InvalidArgument
                           ? std::make_exception_ptr(InvalidCollectiveError(r.errorMessage))
                           : std::make_exception_ptr(MismatchError(r.errorMessage)));
      return;
    case OpKind::Join: {
      p_.agreement.setJoined(false);
      // Join requests live in the world set: the coordinator only answers once every rank joined.
      if (TensorEntry* e = p_.queue.find(tensorKey(0, r.names.front()))) {
        e->handle->lastJoinedRank = r.lastJoinedRank;
      }
      completeNamed(r, nullptr);
      return;
    }
    case OpKind::Barrier: runBarrier(r); return;
    case OpKind::AddProcessSet:
    case OpKind::RemoveProcessSet:
      applyProcessSetChange(r, p_.queue.find(tensorKey(0, r.names.front())));
      completeNamed(r, nullptr);
      return;
    default:
      throwInternal(__FILE__, __LINE__, std::string("no control path for ") + opKindName(r.kind));
  }
}

void ResponseApplier::remember(const Response& r, size_t i, const std::string& key,
                               const Request& request, int setSize) {
  // A hit was rebuilt from this rank's cache: its slot already holds it (and a participant's
  // cache keeps no recency to update).
  if (r.cacheHit || i >= r.cacheSlots.size() || r.cacheSlots[i] < 0) return;
  singleResponseInto(r, i, setSize, &cachedScratch_);
  p_.participant.recordCached(r.cacheSlots[i], key, request, cachedScratch_);
}

void ResponseApplier::runBarrier(const Response& r) {
  ProcessSetTable::Member set = p_.sets.member(r.processSetId);
  if (set.setRank < 0) return;  // not a member: nothing to wait for
  // Cached like a collective: the next barrier of the set is agreed on by its slot.
  for (size_t i = 0; i < r.names.size(); ++i) {
    std::string key = tensorKey(r.processSetId, r.names[i]);
    if (TensorEntry* e = p_.queue.find(key)) {
      remember(r, i, key, e->request, static_cast<int>(set.ranks->size()));
    }
  }
  try {
    p_.sets.communicator(r.processSetId)->barrier();
  } catch (...) {
    completeNamed(r, std::current_exception());
    throw;
  }
  completeNamed(r, nullptr);
}

void ResponseApplier::runData(const Response& r, const std::vector<const uint8_t*>* payloads) {
  ProcessSetTable::Member set = p_.sets.member(r.processSetId);
  if (set.setRank < 0) return;  // not a member: nothing to run here
  Communicator* comm = set.comm;

  // Take the entries out of the queue before running, so that a frontend woken by completion
  // can reuse the name at once. They stay in owned_ until this returns or throws, then go back
  // to the queue to be freed by a submitting thread (TensorQueue::retire): vectors kept between
  // calls, so a collective allocates none.
  std::vector<std::unique_ptr<TensorEntry>>& owned = owned_;
  struct Release {
    TensorQueue& queue;
    std::vector<std::unique_ptr<TensorEntry>>& owned;
    ~Release() { queue.retire(owned); }
  } release{p_.queue, owned};
  std::vector<TensorEntry*> entries = std::move(entries_);
  owned.clear();
  entries.clear();
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto key = tensorKey(r.processSetId, r.names[i]);
    auto e = p_.queue.remove(key);
    finishedKey(key);
    HORA_CHECK(e != nullptr || r.withJoinedRanks,
               "response for tensor '" + r.names[i] + "' this rank never enqueued");
    entries.push_back(e.get());
    if (e) remember(r, i, key, e->request, static_cast<int>(set.ranks->size()));
    owned.push_back(std::move(e));
  }
  if (onGpu(r, owned)) {
    runOnGpu(r, comm, std::move(owned));
    return;
  }
  OpContext cx{*comm, fusion_, *set.ranks, std::move(entries), &p_.timeline, payloads};
  bool recording = p_.timeline.enabled();
  if (recording) {
    for (const auto& name : r.names) p_.timeline.opStart(r.processSetId, name, opKindName(r.kind));
  }
  executeResponse(r, cx);
  if (recording) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      TensorEntry* e = cx.entries[i];
      p_.timeline.opEnd(r.processSetId, r.names[i], dtypeName(r.dtype),
                        e != nullptr ? shapeString(e->tensor.shape) : "[]");
    }
  }
  entries_ = std::move(cx.entries);  // its buffer, for the next collective
}

void ResponseApplier::runOnGpu(const Response& r, Communicator* comm,
                               std::vector<std::unique_ptr<TensorEntry>> owned) {
  if (!gpu_) {
    gpu_ = std::make_unique<GpuExecutor>(gpu::gpuLibrary(), *p_.links.store, p_.links.options,
                                         secondsToMillis(p_.settings.timeoutSeconds),
                                         secondsToMillis(p_.settings.startTimeoutSeconds));
  }
  // The global set's allreduce runs hierarchically on GPUs too when every rank asked for it.
  HierarchicalCommunicator* hierarchy = r.kind == OpKind::Allreduce ? gpuHierarchy(comm) : nullptr;
  gpu_->run(r, std::move(owned), p_.sets.ranks(r.processSetId), &p_.timeline, hierarchy);
}

// The response's device is rank 0's; a rank's own tensors say where its part lives.
bool ResponseApplier::onGpu(const Response& r,
                            const std::vector<std::unique_ptr<TensorEntry>>& owned) const {
  for (const auto& e : owned) {
    if (e) return !e->tensor.device.isCpu();
  }
  return r.device >= 0;
}

void ResponseApplier::applyProcessSetChange(const Response& r, TensorEntry* entry) {
  if (r.kind == OpKind::AddProcessSet) {
    int id = r.processSet.id;
    std::vector<int> ranks(r.processSet.ranks.begin(), r.processSet.ranks.end());
    bool member = std::binary_search(ranks.begin(), ranks.end(), p_.topology.rank);
    p_.sets.add(id, ranks, member ? p_.links.world->subset(ranks) : nullptr);
    if (entry != nullptr) entry->handle->processSetId = id;
  } else {
    p_.sets.remove(r.processSet.id);
    if (gpu_) gpu_->forgetProcessSet(r.processSet.id);
  }
}

void ResponseApplier::stopGpu(std::exception_ptr error, bool failure) {
  if (!gpu_) return;
  // Work already on the device finishes on a clean stop; after a failure it is aborted.
  if (!failure) {
    try {
      gpu_->drain(Clock::now() + secondsToMillis(p_.settings.timeoutSeconds));
    } catch (const std::exception& e) {
      HORA_LOG(Warning, "GPU work failed during shutdown: " << e.what());
    }
  }
  gpu_->failAll(error);
}

}  // namespace hora
