#include "core/coordinator/participant.h"

#include "core/common/bits.h"

namespace hora {

RequestBatch Participant::collect(TensorQueue& queue, const std::vector<std::string>& fresh) {
  RequestBatch batch;
  batch.appliedBatches = applied_;
  std::vector<std::string> keys;
  keys.swap(resend_);
  keys.insert(keys.end(), fresh.begin(), fresh.end());
  for (const auto& key : keys) {
    TensorEntry* e = queue.find(key);
    if (e == nullptr) continue;
    outstanding_.insert(key);
    int slot = cache_.enabled() ? cache_.lookup(key, e->request) : -1;
    if (slot < 0) {
      batch.requests.push_back(e->request);
      continue;
    }
    setBit(batch.cacheBits, static_cast<size_t>(slot));
    sentAsSlot_[key] = slot;
  }
  return batch;
}

void Participant::applyEvictions(const std::vector<int32_t>& slots) {
  for (int32_t slot : slots) {
    cache_.evict(slot);
    for (auto it = sentAsSlot_.begin(); it != sentAsSlot_.end();) {
      if (it->second == slot) {
        resend_.push_back(it->first);
        it = sentAsSlot_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Participant::recordCached(int slot, const std::string& key, const Request& request,
                               const Response& response) {
  cache_.put(slot, key, request, response);
}

}  // namespace hora
