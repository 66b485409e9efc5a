#include "core/coordinator/participant.h"

#include <cstddef>
#include <iterator>
#include <utility>

#include "core/common/bits.h"
#include "core/common/errors.h"
#include "core/fusion/fusion_planner.h"

namespace hora {

RequestBatch Participant::collect(TensorQueue& queue, std::vector<std::string>&& fresh) {
  RequestBatch batch;
  batch.appliedBatches = applied_;
  auto add = [&](std::string& key) {
    TensorEntry* e = queue.find(key);
    if (e == nullptr) return;
    int slot = cache_.enabled() ? cache_.lookup(key, e->request) : -1;
    if (slot < 0) {
      batch.requests.push_back(e->request);
    } else {
      setBit(batch.cacheBits, static_cast<size_t>(slot));
    }
    outstanding_[std::move(key)] = slot < 0 ? kSentInFull : slot;
  };
  // A resend whose tensor finished since (the batch that evicted its slot answered it too) is
  // dropped: the name may be in the queue again by now, and then it is among `fresh`, and sending
  // it twice would count this rank twice at the coordinator.
  size_t resends = 0;
  for (size_t i = 0; i < resend_.size(); ++i) {
    if (outstanding_.count(resend_[i]) == 0) continue;
    if (i != resends) resend_[resends] = std::move(resend_[i]);
    ++resends;
  }
  // Resends first, then the fresh keys: the order in which they were first submitted.
  for (size_t i = 0; i < resends; ++i) add(resend_[i]);
  resend_.clear();
  for (auto& key : fresh) add(key);
  fresh.clear();
  return batch;
}

void Participant::applyEvictions(const std::vector<int32_t>& slots) {
  for (int32_t slot : slots) {
    cache_.evict(slot);
    for (auto& [key, sentAs] : outstanding_) {
      if (sentAs != slot) continue;
      resend_.push_back(key);
      sentAs = kSentInFull;  // until it is resent
    }
  }
}

void Participant::recordCached(int slot, const std::string& key, const Request& request,
                               const Response& response) {
  cache_.put(slot, key, request, response);
}

std::vector<Response> Participant::rebuildHits(
    const std::vector<Response>& responses,
    const std::function<bool(int32_t processSetId)>& member) const {
  std::vector<Response> rebuilt;
  std::vector<const Response*> members;
  for (const Response& r : responses) {
    if (!r.slotsOnly()) continue;
    if (!member(r.processSetId)) {
      rebuilt.push_back(r);
      continue;
    }
    members.clear();
    for (int32_t slot : r.cacheSlots) {
      if (slot < 0 || static_cast<size_t>(slot) >= cache_.capacity() || !cache_.occupied(slot)) {
        throw IoError("negotiation response names cache slot " + std::to_string(slot) +
                      ", which this rank's cache does not hold: the ranks' caches are out of step");
      }
      members.push_back(&cache_.response(slot));
    }
    rebuilt.push_back(fuseInOrder(members));
    rebuilt.back().cacheHit = true;
  }
  return rebuilt;
}

}  // namespace hora
