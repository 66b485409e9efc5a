#include "core/runtime/agreement_driver.h"

#include <algorithm>

#include "core/collectives/algorithm_table.h"
#include "core/common/bits.h"
#include "core/fusion/fusion_planner.h"
#include "core/ops/ops.h"

namespace hora {

AgreementDriver::AgreementDriver(std::unique_ptr<LocalAgreement> agreement, int64_t fusionThreshold,
                                 int worldSize, bool publishesData, Participant& participant,
                                 Coordinator* coordinator, Timeline& timeline)
    : agreement_(std::move(agreement)),
      fusionThreshold_(fusionThreshold),
      worldSize_(worldSize),
      publishesData_(publishesData),
      participant_(participant),
      coordinator_(coordinator),
      timeline_(timeline) {}

size_t AgreementDriver::awaitingCoordinator() const {
  return participant_.outstanding() - (agreement_ ? agreement_->held() : 0);
}

void AgreementDriver::finished(const std::string& key) {
  if (agreement_) agreement_->finished(key);
}

void AgreementDriver::setJoined(bool joined) {
  if (agreement_) agreement_->setJoined(joined);
}

void AgreementDriver::evicted(const std::vector<int32_t>& slots) {
  if (!agreement_) return;
  for (int32_t slot : slots) {
    // The coordinator opens the span again when the tensor reaches it in full.
    if (agreement_->evicted(slot) && recording()) {
      timeline_.negotiateEnd(0, participant_.cachedResponse(slot).names.front());
    }
  }
}

void AgreementDriver::paused(Clock::duration busy) {
  if (agreement_) agreement_->paused(busy);
}

EagerPayload AgreementDriver::eagerData(const Response& cached, int slot,
                                        TensorQueue& queue) const {
  // The fold reads every rank's payload: bounded as the shared payload is.
  size_t most =
      std::min(AgreementBoard::kEagerBytes, collectives::sharedPayloadMaxBytes(worldSize_));
  if (!publishesData_ || !foldsFromPayloads(cached, worldSize_, most)) return {};
  const TensorEntry* entry = queue.find(participant_.cachedKey(slot));
  if (entry == nullptr || !entry->tensor.device.isCpu()) return {};
  return {entry->tensor.data, entry->tensor.bytes()};
}

void AgreementDriver::hold(RequestBatch& batch, Clock::time_point now, TensorQueue& queue) {
  if (!agreement_) return;
  for (const Request& r : batch.requests) {
    if (r.kind == OpKind::Join) agreement_->setJoined(true);
  }
  forEachSetBit(batch.cacheBits.data(), batch.cacheBits.size(), [&](size_t bit) {
    int slot = static_cast<int>(bit);
    const Response& cached = participant_.cachedResponse(slot);
    if (!LocalAgreement::accepts(slot) || cached.processSetId != 0) return;
    agreement_->hold(slot, participant_.cachedKey(slot), now, eagerData(cached, slot, queue));
    clearBit(batch.cacheBits.data(), bit);
    if (recording()) {
      timeline_.negotiateStart(0, cached.names.front(), opKindName(cached.kind));
      timeline_.rankReady(0, cached.names.front(), 0);
    }
  });
  while (!batch.cacheBits.empty() && batch.cacheBits.back() == 0) batch.cacheBits.pop_back();
}

const std::vector<Response>& AgreementDriver::plan(const std::vector<int>& slots) {
  if (slots.empty()) {
    planned_.clear();
    return planned_;
  }
  // Planned from the cache in place: running the plan writes these slots again, only after.
  std::vector<const Response*>& singles = singles_;
  singles.clear();
  for (int slot : slots) {
    singles.push_back(&participant_.cachedResponse(slot));  // its cacheSlots hold `slot`
    if (!coordinator_) continue;
    coordinator_->ranLocally(slot);
    if (timeline_.enabled()) {
      const std::string& name = singles.back()->names.front();
      for (int r = 1; r < worldSize_; ++r) timeline_.rankReady(0, name, r);
      timeline_.negotiateEnd(0, name);
    }
  }
  if (singles.size() == 1) {
    planned_.resize(1);
    planned_.front() = *singles.front();
  } else {
    const int size = worldSize_;
    planned_ = planFusion(singles, fusionThreshold_, [size](int) { return size; });
  }
  // Every tensor of the plan is a hit, whatever the response it was cached from said.
  for (Response& r : planned_) r.cacheHit = true;
  return planned_;
}

RequestBatch AgreementDriver::handOverBatch(const std::vector<int>& slots) {
  RequestBatch batch;
  batch.appliedBatches = participant_.appliedBatches();
  for (int slot : slots) {
    setBit(batch.cacheBits, static_cast<size_t>(slot));
    if (recording()) timeline_.negotiateEnd(0, participant_.cachedResponse(slot).names.front());
  }
  return batch;
}

}  // namespace hora
