// The background thread's side of local agreement (core/coordinator/local_agreement.h): which
// cache hits it holds instead of sending them, running what every rank agreed on, and handing the
// rest to the coordinator.
#include "core/common/bits.h"
#include "core/fusion/fusion_planner.h"
#include "core/runtime_impl.h"

namespace hora {

size_t RuntimeImpl::awaitingCoordinator() const {
  return participant_.outstanding() - (agreement_ ? agreement_->held() : 0);
}

void RuntimeImpl::finishedKey(const std::string& key) {
  participant_.finished(key);
  if (agreement_) agreement_->finished(key);
}

// Cache hits of the global set stay here to be agreed on; the rest of the batch goes on. A join
// going out is published too: the other ranks then stop holding what this rank will not submit.
void RuntimeImpl::holdAgreeable(RequestBatch& batch, Clock::time_point now) {
  for (const Request& r : batch.requests) {
    if (r.kind == OpKind::Join) agreement_->setJoined(true);
  }
  forEachSetBit(batch.cacheBits.data(), batch.cacheBits.size(), [&](size_t bit) {
    int slot = static_cast<int>(bit);
    const Response& cached = participant_.cachedResponse(slot);
    if (!LocalAgreement::accepts(slot) || cached.processSetId != 0) return;
    agreement_->hold(slot, participant_.cachedKey(slot), now);
    batch.cacheBits[bit / 64] &= ~(uint64_t{1} << (bit % 64));
    if (coordinator_ && timeline_.enabled()) {
      timeline_.negotiateStart(0, cached.names.front(), opKindName(cached.kind));
      timeline_.rankReady(0, cached.names.front(), 0);
    }
  });
  while (!batch.cacheBits.empty() && batch.cacheBits.back() == 0) batch.cacheBits.pop_back();
}

bool RuntimeImpl::agreeLocally(Clock::time_point now, Millis cycle) {
  LocalAgreement::Outcome outcome = agreement_->step(participant_.appliedBatches(), now, cycle);
  takeAgreed(outcome);
  return !outcome.handOver.empty();
}

void RuntimeImpl::takeAgreed(const LocalAgreement::Outcome& outcome) {
  handOver(outcome.handOver);
  if (stopped_) return;
  for (const auto& round : outcome.ready) runAgreed(round);
}

// What every rank holds runs as the coordinator would have answered it: the cached responses, in
// slot order, fused under rank 0's threshold.
void RuntimeImpl::runAgreed(const std::vector<int>& slots) {
  if (slots.empty()) return;
  // Planned in place: runData() below writes these slots again, only after the plan is made.
  std::vector<const Response*> singles;
  singles.reserve(slots.size());
  for (int slot : slots) {
    singles.push_back(&participant_.cachedResponse(slot));  // its cacheSlots hold `slot`
    if (!coordinator_) continue;
    coordinator_->ranLocally(slot);
    if (timeline_.enabled()) {
      const std::string& name = singles.back()->names.front();
      for (int r = 1; r < topology_.size; ++r) timeline_.rankReady(0, name, r);
      timeline_.negotiateEnd(0, name);
    }
  }
  auto begin = Clock::now();
  for (const Response& r :
       planFusion(singles, agreedFusionThreshold_, [this](int) { return topology_.size; })) {
    runData(r);
  }
  // No control message was read while the collectives ran: that time is nobody's silence.
  auto spent = Clock::now() - begin;
  liveness_.paused(spent);
  agreement_->paused(spent);
}

// Slots that waited too long, or that another rank handed over, go to the coordinator as the
// cache bits they would have been.
void RuntimeImpl::handOver(const std::vector<int>& slots) {
  if (slots.empty()) return;
  RequestBatch batch;
  batch.appliedBatches = participant_.appliedBatches();
  for (int slot : slots) {
    setBit(batch.cacheBits, static_cast<size_t>(slot));
    if (coordinator_ && timeline_.enabled()) {
      timeline_.negotiateEnd(0, participant_.cachedResponse(slot).names.front());
    }
  }
  batch.waiting = waitingNow_;
  reportedWaiting_ = waitingNow_;
  reportedApplied_ = batch.appliedBatches;
  lastSend_ = Clock::now();
  if (coordinator_) {
    coordinator_->ingest(topology_.rank, batch);
  } else {
    sendToCoordinator(batch);
  }
}

}  // namespace hora
