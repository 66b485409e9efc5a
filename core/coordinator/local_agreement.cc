#include "core/coordinator/local_agreement.h"

#include <algorithm>

#include "core/common/bits.h"
#include "core/common/errors.h"

namespace hora {
namespace {

constexpr size_t kWords = AgreementBoard::kWords;

}  // namespace

LocalAgreement::LocalAgreement(std::unique_ptr<AgreementBoard> board, Millis handOverAfter,
                               Millis openBound)
    : board_(std::move(board)),
      handOverAfter_(handOverAfter),
      openBound_(openBound),
      rounds_(static_cast<size_t>(board_->size())) {}

void LocalAgreement::hold(int slot, const std::string& key, Clock::time_point now) {
  HORA_CHECK(accepts(slot) && held_.count(slot) == 0, "slot held twice for local agreement");
  held_[slot] = Held{key, now, false};
}

bool LocalAgreement::othersAhead() const {
  for (int r = 0; r < board_->size(); ++r) {
    if (r != board_->rank() && board_->published(r) > round_) return true;
  }
  return false;
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
  for (int r = 0; r < board_->size(); ++r) board_->read(r, round_, &rounds_[r]);
  uint64_t ready[kWords], handedOver[kWords];
  bool sameBatches = true;
  for (size_t w = 0; w < kWords; ++w) {
    ready[w] = ~uint64_t{0};
    handedOver[w] = 0;
    for (const auto& round : rounds_) {
      ready[w] &= round.ready[w];
      handedOver[w] |= round.handedOver[w];
    }
  }
  bool joined = false;
  for (const auto& round : rounds_) {
    sameBatches = sameBatches && round.applied == rounds_[0].applied;
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
      HORA_CHECK(held_.count(slot) == 1, "an agreed slot this rank no longer holds");
      agreed.push_back(slot);
      held_.erase(slot);
    });
    if (!agreed.empty()) out.ready.push_back(std::move(agreed));
  }
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    if (othersJoined_ || bitSet(handedOver, static_cast<size_t>(it->first))) handOver(it, out);
    it = next;
  }
  return out;
}

void LocalAgreement::handOver(std::map<int, Held>::iterator it, Outcome& out) {
  out.handOver.push_back(it->first);
  handedOver_[it->first] = it->second.key;
  handOverNews_ = true;
  held_.erase(it);
}

LocalAgreement::Outcome LocalAgreement::step(uint64_t applied, Clock::time_point now,
                                             Millis cycle) {
  board_->looked();
  Outcome out;
  if (resolvable()) out = resolve();
  if (open_) return out;
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    if (othersJoined_ || now - it->second.since >= handOverAfter_) handOver(it, out);
    it = next;
  }
  bool fresh = false, waiting = false;
  for (const auto& kv : held_) (kv.second.published ? waiting : fresh) = true;
  bool news = fresh && (!waiting || now - lastPublish_ >= cycle);
  bool batchesMoved = !held_.empty() && applied != publishedApplied_;
  if (!(news || batchesMoved || handOverNews_ || joinNews_ || othersAhead())) return out;
  publish(applied, now);
  // Every other rank may have published this round already: then no wake-up would come for it.
  if (resolvable()) {
    Outcome more = resolve();
    out.ready.insert(out.ready.end(), more.ready.begin(), more.ready.end());  // a round apart
    out.handOver.insert(out.handOver.end(), more.handOver.begin(), more.handOver.end());
  }
  return out;
}

void LocalAgreement::publish(uint64_t applied, Clock::time_point now) {
  AgreementBoard::Round mine;
  mine.applied = applied;
  mine.joined = joined_ ? 1 : 0;
  for (auto& kv : held_) {
    setBit(mine.ready, static_cast<size_t>(kv.first));
    kv.second.published = true;
  }
  for (const auto& kv : handedOver_) setBit(mine.handedOver, static_cast<size_t>(kv.first));
  board_->publish(++round_, mine);
  open_ = true;
  openedAt_ = now;
  publishedApplied_ = applied;
  handOverNews_ = false;
  joinNews_ = false;
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
  return held_.erase(slot) > 0;
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
  if (held_.empty()) return Millis(-1);
  Clock::time_point due = Clock::time_point::max();
  bool fresh = false, waiting = false;
  for (const auto& kv : held_) {
    due = std::min(due, kv.second.since + handOverAfter_);
    (kv.second.published ? waiting : fresh) = true;
  }
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
