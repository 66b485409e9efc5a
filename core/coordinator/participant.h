#pragma once
// Participant: every rank's side of negotiation (world rank 0 included). It turns newly enqueued
// tensors into RequestBatches for the coordinator, sending a cache bit instead of a full request
// when the rank's cache copy holds the same name with the same parameters, and it mirrors the
// coordinator's cache decisions as response batches are applied.
//
// When an applied batch evicts a slot, tensors this rank reported by that slot and that are still
// pending are queued for resending in full (the coordinator dropped or ignored those bits).
//
// Background thread only.
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/coordinator/codec.h"
#include "core/coordinator/response_cache.h"
#include "core/coordinator/tensor_queue.h"

namespace hora {

class Participant {
 public:
  explicit Participant(size_t cacheCapacity) : cache_(cacheCapacity) {}

  // True when tensors wait to be (re)sent.
  bool hasResends() const { return !resend_.empty(); }
  // Builds the batch for pending resends plus the `fresh` keys; entries no longer queued are
  // skipped. The keys are moved out of `fresh`, which is left empty with its buffer kept.
  RequestBatch collect(TensorQueue& queue, std::vector<std::string>&& fresh);

  // Applying a response batch, in this order: evictions, then cache puts of its responses.
  void applyEvictions(const std::vector<int32_t>& slots);
  // response: the single-tensor response of that slot (local_agreement.h runs it again).
  void recordCached(int slot, const std::string& key, const Request& request,
                    const Response& response);
  // The responses of a decoded batch that arrived as slots alone (Response::slotsOnly()), rebuilt
  // from this rank's cache, in their order. Call before the batch's evictions are applied: rank 0
  // answered them from the cache as it was before this batch. A rank outside the response's
  // process set (member() false) never cached its tensors: it gets the response as it came, with
  // nothing to run. Throws IoError for a slot a member does not hold (the caches went out of step).
  std::vector<Response> rebuildHits(const std::vector<Response>& responses,
                                    const std::function<bool(int32_t processSetId)>& member) const;
  // The slot's key and single-tensor response (the slot is occupied).
  const std::string& cachedKey(int slot) const { return cache_.key(slot); }
  const Response& cachedResponse(int slot) const { return cache_.response(slot); }
  void finished(const std::string& key) { outstanding_.erase(key); }
  // Tensors sent and not yet answered.
  size_t outstanding() const { return outstanding_.size(); }
  void batchApplied() { ++applied_; }
  uint64_t appliedBatches() const { return applied_; }

 private:
  ResponseCache cache_;
  // Sent and not yet answered: the cache slot each was sent as, or kSentInFull.
  std::unordered_map<std::string, int> outstanding_;
  static constexpr int kSentInFull = -1;
  std::vector<std::string> resend_;
  uint64_t applied_ = 0;
};

}  // namespace hora
