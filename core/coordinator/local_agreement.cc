#include "core/coordinator/local_agreement.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "core/common/bits.h"
#include "core/common/errors.h"

namespace hora {

LocalAgreement::LocalAgreement(std::unique_ptr<AgreementBoard> board, Millis handOverAfter,
                               Millis openBound)
    : board_(std::move(board)),
      handOverAfter_(handOverAfter),
      openBound_(openBound),
      held_(AgreementBoard::kSlots),
      rounds_{std::vector<AgreementBoard::Round>(static_cast<size_t>(board_->size())),
              std::vector<AgreementBoard::Round>(static_cast<size_t>(board_->size()))} {}

void LocalAgreement::hold(int slot, const std::string& key, Clock::time_point now,
                          EagerPayload eager) {
  HORA_CHECK(accepts(slot) && !isHeld(slot), "slot held twice for local agreement");
  HORA_CHECK(eager.bytes <= AgreementBoard::kEagerBytes, "an eager payload larger than a round's");
  Held& h = held_[static_cast<size_t>(slot)];
  h.key = key;
  h.since = now;
  h.published = false;
  h.eager = eager.data != nullptr;
  if (h.eager) {
    const auto* bytes = static_cast<const uint8_t*>(eager.data);
    h.eagerData.assign(bytes, bytes + eager.bytes);
  }
  setBit(heldBits_, static_cast<size_t>(slot));
  ++heldCount_;
}

void LocalAgreement::release(int slot) {
  clearBit(heldBits_, static_cast<size_t>(slot));
  --heldCount_;
}

bool LocalAgreement::othersAhead() const {
  for (int r = 0; r < board_->size(); ++r) {
    if (r != board_->rank() && board_->published(r) > round_) return true;
  }
  return false;
}

// Another rank started a round: this rank joins it at once when it holds slots. Empty-handed, the
// round could agree on nothing (the others' tensors are not held here yet), and this rank's own
// tensors are usually a moment behind (a rank that finished the last round first): it waits up to
// a cycle for them, then joins anyway, so that hand-overs, joins and stalls still travel.
bool LocalAgreement::joinsOthers(Clock::time_point now, Millis cycle) {
  if (!othersAhead()) return false;
  if (heldCount_ > 0) return true;
  if (!aheadSince_) aheadSince_ = now;
  return now - *aheadSince_ >= cycle;
}

bool LocalAgreement::resolvable() const {
  if (!open_) return false;
  for (int r = 0; r < board_->size(); ++r) {
    if (board_->published(r) < round_) return false;
  }
  return true;
}

LocalAgreement::Outcome LocalAgreement::resolve() {
  HORA_CHECK(resolvable(), "resolving an agreement round not every rank published");
  Outcome out;
  open_ = false;
  turn_ ^= 1;
  std::vector<AgreementBoard::Round>& rounds = rounds_[turn_];
  for (int r = 0; r < board_->size(); ++r) board_->read(r, round_, &rounds[r]);
  uint64_t ready[kWords], handedOver[kWords];
  bool sameBatches = true;
  for (size_t w = 0; w < kWords; ++w) {
    ready[w] = ~uint64_t{0};
    handedOver[w] = 0;
    for (const auto& round : rounds) {
      ready[w] &= round.ready[w];
      handedOver[w] |= round.handedOver[w];
    }
  }
  bool joined = false;
  for (const auto& round : rounds) {
    sameBatches = sameBatches && round.applied == rounds[0].applied;
    joined = joined || round.joined != 0;
  }
  if (sameBatches) {
    // A join ends with a batch that every rank applies: a round whose ranks had applied
    // different batches may still show a join that is over.
    othersJoined_ = joined;
    std::vector<int> agreed;
    forEachSetBit(ready, kWords, [&](size_t bit) {
      int slot = static_cast<int>(bit);
      // This rank published the bit, and no batch it applied since could have taken it back.
      HORA_CHECK(isHeld(slot), "an agreed slot this rank no longer holds");
      agreed.push_back(slot);
      release(slot);
    });
    if (!agreed.empty()) {
      out.payloads.push_back(eagerPayloads(rounds, agreed));
      out.ready.push_back(std::move(agreed));
    }
  }
  forEachHeld([&](int slot) {
    if (othersJoined_ || bitSet(handedOver, static_cast<size_t>(slot))) handOver(slot, out);
  });
  return out;
}

std::vector<const uint8_t*> LocalAgreement::eagerPayloads(
    const std::vector<AgreementBoard::Round>& rounds, const std::vector<int>& slots) {
  std::vector<const uint8_t*> payloads;
  if (slots.size() != 1 || rounds.size() < 2) return payloads;
  // Every rank's round carries this slot's data, of one size: each rank held it alone.
  for (const auto& round : rounds) {
    if (round.eagerSlot != static_cast<uint64_t>(slots[0]) + 1 ||
        round.eagerBytes != rounds[0].eagerBytes) {
      return {};
    }
  }
  for (const auto& round : rounds) payloads.push_back(round.eager);
  return payloads;
}

void LocalAgreement::handOver(int slot, Outcome& out) {
  out.handOver.push_back(slot);
  handedOver_[slot] = held_[static_cast<size_t>(slot)].key;
  handOverNews_ = true;
  release(slot);
}

LocalAgreement::Outcome LocalAgreement::step(uint64_t applied, Clock::time_point now,
                                             Millis cycle) {
  board_->looked();
  Outcome out;
  if (resolvable()) out = resolve();
  if (open_) return out;
  bool fresh = false, waiting = false;
  forEachHeld([&](int slot) {
    const Held& h = held_[static_cast<size_t>(slot)];
    if (othersJoined_ || now - h.since >= handOverAfter_) {
      handOver(slot, out);
    } else {
      (h.published ? waiting : fresh) = true;
    }
  });
  bool news = fresh && (!waiting || now - lastPublish_ >= cycle);
  bool batchesMoved = heldCount_ > 0 && applied != publishedApplied_;
  if (!(news || batchesMoved || handOverNews_ || joinNews_ || joinsOthers(now, cycle))) return out;
  publish(applied, now);
  // Every other rank may have published this round already: then no wake-up would come for it.
  if (resolvable()) {
    Outcome more = resolve();
    if (out.ready.empty() && out.handOver.empty()) return more;  // (a rank alone, always)
    out.ready.insert(out.ready.end(), std::make_move_iterator(more.ready.begin()),
                     std::make_move_iterator(more.ready.end()));  // a round apart
    out.payloads.insert(out.payloads.end(), std::make_move_iterator(more.payloads.begin()),
                        std::make_move_iterator(more.payloads.end()));
    out.handOver.insert(out.handOver.end(), more.handOver.begin(), more.handOver.end());
  }
  return out;
}

void LocalAgreement::publish(uint64_t applied, Clock::time_point now) {
  AgreementBoard::Round& mine = mine_;
  mine.applied = applied;
  mine.joined = joined_ ? 1 : 0;
  std::memset(mine.ready, 0, sizeof(mine.ready));
  std::memset(mine.handedOver, 0, sizeof(mine.handedOver));
  mine.eagerSlot = 0;
  mine.eagerBytes = 0;
  forEachHeld([&](int slot) {
    setBit(mine.ready, static_cast<size_t>(slot));
    Held& h = held_[static_cast<size_t>(slot)];
    h.published = true;
    if (heldCount_ == 1 && h.eager) {
      mine.eagerSlot = static_cast<uint64_t>(slot) + 1;
      mine.eagerBytes = h.eagerData.size();
      if (!h.eagerData.empty()) std::memcpy(mine.eager, h.eagerData.data(), h.eagerData.size());
    }
  });
  for (const auto& kv : handedOver_) setBit(mine.handedOver, static_cast<size_t>(kv.first));
  board_->publish(++round_, mine);
  open_ = true;
  openedAt_ = now;
  publishedApplied_ = applied;
  handOverNews_ = false;
  joinNews_ = false;
  aheadSince_.reset();
  lastPublish_ = now;
}

void LocalAgreement::setJoined(bool joined) {
  // A join ends for every rank at once (when the last rank joins), so nobody is joined any more.
  if (!joined) othersJoined_ = false;
  if (joined == joined_) return;
  joined_ = joined;
  joinNews_ = true;
}

bool LocalAgreement::evicted(int slot) {
  handedOver_.erase(slot);
  if (!accepts(slot) || !isHeld(slot)) return false;
  release(slot);
  return true;
}

void LocalAgreement::finished(const std::string& key) {
  for (auto it = handedOver_.begin(); it != handedOver_.end(); ++it) {
    if (it->second == key) {
      handedOver_.erase(it);
      return;
    }
  }
}

Millis LocalAgreement::untilDue(Clock::time_point now, Millis cycle) const {
  if (open_) return millisUntil(openedAt_ + openBound_, now);
  if (heldCount_ == 0) return aheadSince_ ? millisUntil(*aheadSince_ + cycle, now) : Millis(-1);
  Clock::time_point due = Clock::time_point::max();
  bool fresh = false, waiting = false;
  forEachHeld([&](int slot) {
    const Held& h = held_[static_cast<size_t>(slot)];
    due = std::min(due, h.since + handOverAfter_);
    (h.published ? waiting : fresh) = true;
  });
  if (fresh && waiting) due = std::min(due, lastPublish_ + cycle);
  return millisUntil(due, now);
}

void LocalAgreement::failIfStalled(Clock::time_point now) const {
  if (!open_ || now - openedAt_ < openBound_) return;
  std::string behind;
  for (int r = 0; r < board_->size(); ++r) {
    if (board_->published(r) < round_) behind += (behind.empty() ? "" : ", ") + std::to_string(r);
  }
  throw TimeoutError("rank " + std::to_string(board_->rank()) + ": ranks [" + behind +
                     "] published no agreement round for " + std::to_string(openBound_.count()) +
                     " ms while this rank waited for them to agree on cached tensors (stopped, "
                     "hung or unreachable; HORA_TIMEOUT_SECONDS bounds this)");
}

}  // namespace hora
