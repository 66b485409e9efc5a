#include "core/coordinator/coordinator.h"

#include <algorithm>
#include <sstream>

#include "core/common/bits.h"
#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/coordinator/deadlock.h"
#include "core/coordinator/response_builder.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_planner.h"

namespace hora {
namespace {

// How long a deadlock must stand unchanged before its tensors fail: reports of ranks that are
// about to be released are still on their way for at most a few cycles.
constexpr Millis kDeadlockConfirm{1000};
constexpr size_t kTensorsPerRank = 6;

bool cacheable(const Response& r) {
  switch (r.kind) {
    case OpKind::Allreduce:
    case OpKind::Adasum:
    case OpKind::Allgather:
    case OpKind::Alltoall:
    case OpKind::Broadcast:
    case OpKind::Reducescatter:
    case OpKind::Barrier: return !r.withJoinedRanks;
    default: return false;
  }
}

}  // namespace

Coordinator::Coordinator(int worldSize, const ProcessSetTable& sets, const Settings& settings,
                         int nextProcessSetId, Timeline* timeline)
    : worldSize_(worldSize),
      sets_(sets),
      timeline_(timeline),
      settings_(settings),
      cache_(static_cast<size_t>(settings.cacheCapacity)),
      hits_(static_cast<size_t>(settings.cacheCapacity), worldSize),
      slotChangedAt_(static_cast<size_t>(settings.cacheCapacity), 0),
      joined_(static_cast<size_t>(worldSize), false),
      joinedBits_((static_cast<size_t>(worldSize) + 63) / 64, 0),
      nextProcessSetId_(nextProcessSetId),
      autotuner_(settings),
      disabledDeadlocks_(settings.stallCheckDisable),
      waiting_(static_cast<size_t>(worldSize), false),
      waitReportedAt_(static_cast<size_t>(worldSize), 0) {}

void Coordinator::ingest(int fromRank, RequestBatch&& batch) {
  ++changes_;
  waiting_[fromRank] = batch.waiting;
  waitReportedAt_[fromRank] = batch.appliedBatches;
  // The common report, of a slot other ranks reported already and unchanged since the sender's
  // view, sets a bit and a count; addHit handles the rest (a slot with reports is occupied).
  const uint64_t applied = batch.appliedBatches;
  const bool recording = timeline_ != nullptr && timeline_->enabled();
  const size_t slots = slotChangedAt_.size();
  forEachSetBit(batch.cacheBits.data(), batch.cacheBits.size(), [&](size_t slot) {
    const int s = static_cast<int>(slot);
    if (!recording && slot < slots && slotChangedAt_[slot] < applied && hits_.count(s) > 0) {
      hits_.add(s, fromRank);
    } else {
      addHit(fromRank, s, applied);
    }
  });
  for (auto& r : batch.requests) {
    if (r.kind == OpKind::Join) {
      addJoin(fromRank, r);
    } else {
      addFull(fromRank, std::move(r));
    }
  }
  if (batch.shutdown) requestShutdown("rank " + std::to_string(fromRank) + " shut down");
}

void Coordinator::requestShutdown(const std::string& reason) {
  if (shutdown_) return;
  shutdown_ = true;
  shutdownReason_ = reason;
}

void Coordinator::setWaiting(int rank, bool waiting, uint64_t appliedBatches) {
  if (waiting_[rank] == waiting && waitReportedAt_[rank] == appliedBatches) return;
  ++changes_;
  waiting_[rank] = waiting;
  waitReportedAt_[rank] = appliedBatches;
}

std::vector<int> Coordinator::hitRanks(const PendingTensor& p) const {
  return p.slot >= 0 ? hits_.ranks(p.slot) : std::vector<int>();
}

std::vector<uint64_t> Coordinator::submittedBits(const PendingTensor& p) const {
  std::vector<uint64_t> have;
  if (p.slot >= 0) {
    have.assign(hits_.row(p.slot), hits_.row(p.slot) + hits_.words());
  } else {
    have.assign(joinedBits_.size(), 0);
  }
  for (const auto& r : p.requests) {
    if (r.rank >= 0 && r.rank < worldSize_) setBit(have, static_cast<size_t>(r.rank));
  }
  for (size_t w = 0; w < p.twins.size() && w < have.size(); ++w) have[w] |= p.twins[w];
  return have;
}

std::vector<int> Coordinator::submitters(const PendingTensor& p) const {
  std::vector<uint64_t> have = submittedBits(p);
  std::vector<int> ranks;
  forEachSetBit(have.data(), have.size(), [&](size_t r) { ranks.push_back(static_cast<int>(r)); });
  return ranks;
}

int Coordinator::setSize(int processSetId) const {
  if (processSetId == 0) return worldSize_;  // the world set is never removed
  return sets_.contains(processSetId) ? sets_.size(processSetId) : -1;
}

std::vector<int> Coordinator::missingRanks(const PendingTensor& p) const {
  return missingRanks(p, submittedBits(p));
}

std::vector<int> Coordinator::missingRanks(const PendingTensor& p,
                                           const std::vector<uint64_t>& have) const {
  std::vector<int> missing;
  if (p.processSetId == 0) {
    // The world: every rank that neither asked nor joined, a word at a time.
    for (size_t w = 0; w < have.size(); ++w) {
      uint64_t bits = ~(have[w] | joinedBits_[w]);
      for (; bits != 0; bits &= bits - 1) {
        const size_t r = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        if (r >= static_cast<size_t>(worldSize_)) break;
        missing.push_back(static_cast<int>(r));
      }
    }
    return missing;
  }
  for (int r : sets_.ranks(p.processSetId)) {
    if (!joined_[r] && !bitSet(have.data(), static_cast<size_t>(r))) missing.push_back(r);
  }
  return missing;
}

std::vector<int> Coordinator::awaitedRanks() const {
  // Called every few milliseconds while tensors are pending: whole words, no sorting.
  std::vector<uint64_t> awaited(joinedBits_.size(), 0);
  for (const auto& kv : pending_) {
    const PendingTensor& p = kv.second;
    if (p.processSetId == 0) {
      std::vector<uint64_t> have = submittedBits(p);
      for (size_t w = 0; w < have.size(); ++w) awaited[w] |= ~(have[w] | joinedBits_[w]);
      continue;
    }
    if (!sets_.contains(p.processSetId)) continue;
    for (int r : missingRanks(p)) setBit(awaited, static_cast<size_t>(r));
  }
  std::vector<int> ranks;
  forEachSetBit(awaited.data(), awaited.size(), [&](size_t r) {
    if (r < static_cast<size_t>(worldSize_)) ranks.push_back(static_cast<int>(r));
  });
  return ranks;
}

bool Coordinator::failDeadlocks(Clock::time_point now) {
  if (disabledDeadlocks_ || pending_.empty()) return false;
  std::vector<bool> blocked(static_cast<size_t>(worldSize_));
  bool anyBlocked = false;
  for (int r = 0; r < worldSize_; ++r) {
    blocked[r] = waiting_[r] && waitReportedAt_[r] == nextSequence_;
    anyBlocked = anyBlocked || blocked[r];
  }
  if (!anyBlocked) {  // a deadlock needs blocked ranks (findDeadlockedRanks would find none)
    deadlockSeenAt_ = ~uint64_t(0);
    return false;
  }
  std::vector<PendingView> views;
  for (const auto& kv : pending_) {
    const PendingTensor& p = kv.second;
    if (!sets_.contains(p.processSetId) || isReady(p)) return false;  // about to be answered
  }
  for (const auto& kv : pending_) {
    std::vector<uint64_t> have = submittedBits(kv.second);
    std::vector<int> submitted;
    forEachSetBit(have.data(), have.size(),
                  [&](size_t r) { submitted.push_back(static_cast<int>(r)); });
    views.push_back({std::move(submitted), missingRanks(kv.second, have)});
  }
  std::vector<int> stuck = findDeadlockedRanks(views, blocked);
  if (stuck.empty()) {
    deadlockSeenAt_ = ~uint64_t(0);
    return false;
  }
  if (deadlockSeenAt_ != changes_) {
    deadlockSeenAt_ = changes_;
    deadlockSince_ = now;
    return false;
  }
  if (now - deadlockSince_ < kDeadlockConfirm) return false;
  std::string report = deadlockReport(stuck);
  HORA_LOG(Error, report);
  std::vector<std::string> keys;
  for (const auto& kv : pending_) {
    std::vector<int> have = submitters(kv.second);
    for (int r : stuck) {
      if (std::binary_search(have.begin(), have.end(), r)) {
        keys.push_back(kv.first);
        break;
      }
    }
  }
  for (const auto& key : keys) {
    auto it = pending_.find(key);
    if (timeline_ != nullptr) timeline_->negotiateEnd(it->second.processSetId, it->second.name);
    immediate_.push_back(
        errorResponse(it->second.name, it->second.processSetId, ResponseError::Mismatch, report));
    if (it->second.slot >= 0) hits_.clear(it->second.slot);
    pending_.erase(it);
    int slot = cache_.slotOf(key);
    if (slot >= 0) evictSlot(slot);
  }
  deadlockSeenAt_ = ~uint64_t(0);
  return true;
}

std::string Coordinator::deadlockReport(const std::vector<int>& stuck) const {
  std::ostringstream out;
  out << "Deadlock: ranks [";
  for (size_t i = 0; i < stuck.size(); ++i) out << (i ? ", " : "") << stuck[i];
  out << "] are blocked waiting for collectives that can never run, because the ranks they need "
         "are blocked waiting for different ones. Every rank must submit the same collectives "
         "(same names and process sets); all pending collectives of these ranks fail. Per rank, "
         "what it waits in:";
  std::vector<std::pair<uint64_t, const PendingTensor*>> ordered;
  for (const auto& kv : pending_) ordered.emplace_back(kv.second.arrival, &kv.second);
  std::sort(ordered.begin(), ordered.end());
  for (int rank : stuck) {
    out << "\n  rank " << rank << ":";
    size_t shown = 0;
    for (const auto& entry : ordered) {
      const PendingTensor& p = *entry.second;
      std::string site;
      bool mine = false;
      for (const auto& r : p.requests) {
        if (r.rank == rank) {
          mine = true;
          site = r.callSite;
        }
      }
      if (!p.twins.empty() && bitSet(p.twins.data(), static_cast<size_t>(rank))) {
        mine = true;
        site = p.requests.front().callSite;
      }
      if (!mine && !(p.slot >= 0 && hits_.has(p.slot, rank))) continue;
      if (shown++ == kTensorsPerRank) {
        out << " ...";
        break;
      }
      if (site.empty()) site = callSiteOf(p);
      out << (shown > 1 ? ";" : "") << " " << kindOf(p) << " '" << p.name << "'";
      if (p.processSetId != 0) out << " (process set " << p.processSetId << ")";
      out << " submitted at " << site;
    }
  }
  return out.str();
}

void Coordinator::addFull(int fromRank, Request&& request) {
  auto key = tensorKey(request.processSetId, request.name);
  // A name with full requests pending holds no slot (the first one evicted it): no cache lookup.
  auto it = pending_.find(key);
  PendingTensor* p = it != pending_.end() && !it->second.requests.empty() ? &it->second : nullptr;
  if (p == nullptr) {
    // A full request for a cached name means parameters changed on that rank: forget the slot, so
    // every rank renegotiates this name in full.
    int slot = cache_.slotOf(key);
    if (slot >= 0) evictSlot(slot);
    p = &pendingFor(key, request.processSetId, request.name, request.kind);
  }
  if (!addTwin(*p, fromRank, request)) {
    request.rank = fromRank;
    p->requests.push_back(std::move(request));
  }
  markReady(*p, fromRank);
}

bool Coordinator::addTwin(PendingTensor& p, int fromRank, const Request& request) {
  if (p.requests.empty()) return false;  // the first request: kept in full
  const Request& first = p.requests.front();
  if (fromRank == first.rank || request.name != first.name || request.callSite != first.callSite ||
      !request.sameParams(first)) {
    return false;
  }
  if (p.twins.empty()) p.twins.assign(joinedBits_.size(), 0);
  // A rank that asks twice is kept in full, and counted twice, as before twins.
  if (bitSet(p.twins.data(), static_cast<size_t>(fromRank))) return false;
  setBit(p.twins.data(), static_cast<size_t>(fromRank));
  ++p.twinCount;
  return true;
}

void Coordinator::expandTwins(PendingTensor& p) {
  forEachSetBit(p.twins.data(), p.twins.size(), [&](size_t r) {
    Request copy = p.requests.front();
    copy.rank = static_cast<int32_t>(r);
    p.requests.push_back(std::move(copy));
  });
  p.twins.clear();
  p.twinCount = 0;
}

PendingTensor& Coordinator::pendingFor(const std::string& key, int processSetId,
                                       const std::string& name, OpKind kind) {
  auto& p = pending_[key];
  if (p.requests.empty() && p.slot < 0) {  // new: an entry without requests has a slot
    p.processSetId = processSetId;
    p.name = name;
    p.arrival = arrivals_++;
    p.firstSeen = Clock::now();
    if (timeline_ != nullptr) timeline_->negotiateStart(processSetId, name, opKindName(kind));
    if (firstKey_.empty()) firstKey_ = key;
    if (key == firstKey_ && autotuner_.active()) {
      if (auto tuned = autotuner_.onStep(p.firstSeen)) {
        settings_.fusionThreshold = tuned->fusionThreshold;
        newCycleTimeMs_ = tuned->cycleTimeMs;
        newFusionThreshold_ = tuned->fusionThreshold;
      }
    }
  }
  return p;
}

void Coordinator::markReady(const PendingTensor& p, int fromRank) {
  if (timeline_ == nullptr || !timeline_->enabled() || !sets_.contains(p.processSetId)) return;
  timeline_->rankReady(p.processSetId, p.name, sets_.setRankOf(p.processSetId, fromRank));
}

const char* Coordinator::kindOf(const PendingTensor& p) const {
  if (!p.requests.empty()) return opKindName(p.requests.front().kind);
  if (cache_.occupied(p.slot)) return opKindName(cache_.response(p.slot).kind);
  return "UNKNOWN";
}

std::string Coordinator::callSiteOf(const PendingTensor& p) const {
  for (const auto& r : p.requests) {
    if (!r.callSite.empty()) return r.callSite;
  }
  if (cache_.occupied(p.slot) && !cache_.request(p.slot).callSite.empty()) {
    return cache_.request(p.slot).callSite;
  }
  return "an unknown call site";
}

void Coordinator::addHit(int fromRank, int slot, uint64_t senderApplied) {
  // Stale: the slot changed in a batch the sender had not applied; it will resend in full.
  if (!cache_.occupied(slot) || slotChangedAt_[slot] >= senderApplied) return;
  // Only the first report of a slot looks its tensor up by name: while the slot has reports, its
  // pending tensor exists, has no full requests and refers to it (evictSlot and the places that
  // answer or drop a pending tensor clear the slot's reports).
  if (hits_.count(slot) == 0) {
    const Response& cached = cache_.response(slot);
    auto& p = pendingFor(cache_.key(slot), cached.processSetId, cached.names.front(), cached.kind);
    if (!p.requests.empty()) {
      // Mixed with full requests: renegotiate in full (the eviction makes this rank resend).
      evictSlot(slot);
      return;
    }
    p.slot = slot;
  }
  if (!hits_.add(slot, fromRank)) return;
  if (timeline_ != nullptr && timeline_->enabled()) {
    markReady(pending_.at(cache_.key(slot)), fromRank);
  }
}

void Coordinator::addJoin(int fromRank, const Request& request) {
  if (joined_[fromRank]) return;
  joined_[fromRank] = true;
  setBit(joinedBits_, static_cast<size_t>(fromRank));
  ++joinedCount_;
  lastJoined_ = fromRank;
  joinName_ = request.name;
  if (joinedCount_ < worldSize_) return;
  Response r;
  r.kind = OpKind::Join;
  r.names = {joinName_};
  r.lastJoinedRank = lastJoined_;
  immediate_.push_back(std::move(r));
  std::fill(joined_.begin(), joined_.end(), false);
  std::fill(joinedBits_.begin(), joinedBits_.end(), 0);
  joinedCount_ = 0;
}

void Coordinator::evictSlot(int slot) {
  if (!cache_.occupied(slot)) return;
  // Ranks that reported this slot will resend in full once they apply the eviction.
  auto it = pending_.find(cache_.key(slot));
  if (it != pending_.end() && it->second.slot == slot) {
    it->second.slot = -1;
    if (it->second.requests.empty()) pending_.erase(it);
  }
  hits_.clear(slot);
  cache_.evict(slot);
  slotChangedAt_[slot] = nextSequence_;
  evictions_.push_back(slot);
}

bool Coordinator::isReady(const PendingTensor& p) const {
  const int members = setSize(p.processSetId);
  if (members < 0) return true;  // answered with an error
  size_t have = p.requests.size() + static_cast<size_t>(p.twinCount) +
                (p.slot >= 0 ? static_cast<size_t>(hits_.count(p.slot)) : 0);
  if (have == 0) return false;
  // Every rank asks once (a full request or a bit), so while no rank has joined a tensor is
  // ready when as many asked as the set has members.
  if (joinedCount_ == 0) return have >= static_cast<size_t>(members);
  // While ranks have joined, an op that cannot run then fails for each rank that asks, without
  // waiting for the others: their names need not ever match (automatic names count each rank's
  // own calls, and a joined rank skipped some). Only an all-join resets the state, and a rank's
  // requests reach here before its join, so every rank asking before then gets the same error.
  if (!runsWhileJoined(p)) return true;
  size_t needed = 0;
  for (int r : sets_.ranks(p.processSetId)) {
    if (!joined_[r]) ++needed;
  }
  // Ranks that submitted and then joined still count as submitted.
  size_t fromJoined = 0;
  for (const auto& q : p.requests) fromJoined += joined_[q.rank] ? 1 : 0;
  for (size_t w = 0; w < p.twins.size(); ++w) {
    fromJoined += static_cast<size_t>(__builtin_popcountll(p.twins[w] & joinedBits_[w]));
  }
  for (int r : hitRanks(p)) fromJoined += joined_[r] ? 1 : 0;
  return have - fromJoined >= needed;
}

bool Coordinator::runsWhileJoined(const PendingTensor& p) const {
  OpKind kind = OpKind::Allreduce;
  if (!p.requests.empty()) {
    kind = p.requests.front().kind;
  } else if (cache_.occupied(p.slot)) {
    kind = cache_.response(p.slot).kind;
  }
  return kind == OpKind::Allreduce || kind == OpKind::Barrier;
}

void Coordinator::ranLocally(int slot) {
  if (cache_.occupied(slot)) cache_.touch(slot);
}

Response Coordinator::respond(const std::string& key, PendingTensor& p) {
  if (!sets_.contains(p.processSetId)) {
    return errorResponse(p.name, p.processSetId, ResponseError::InvalidArgument,
                         "process set " + std::to_string(p.processSetId) +
                             " was removed while tensor '" + p.name + "' waited in it");
  }
  bool someJoined = joinedCount_ > 0;
  if (p.requests.empty()) {
    // Every rank reported a cache hit: the cached response holds.
    Response r = cache_.response(p.slot);
    cache_.touch(p.slot);
    r.cacheSlots = {p.slot};
    r.cacheHit = true;
    if (someJoined) {
      if (r.kind != OpKind::Allreduce)
        return joinUnsupportedResponse(p.name, p.processSetId, r.kind);
      r.withJoinedRanks = true;
      r.cacheSlots = {-1};
      r.cacheHit = false;
    }
    return r;
  }
  // Requests that differ are checked and listed rank by rank, the twins among them.
  if (p.twinCount > 0 && p.requests.size() > 1) expandTwins(p);
  // Often in rank order already (batches read in the order of their senders): then no sort.
  auto byRank = [](const Request& a, const Request& b) { return a.rank < b.rank; };
  if (!std::is_sorted(p.requests.begin(), p.requests.end(), byRank)) {
    std::sort(p.requests.begin(), p.requests.end(), byRank);
  }
  NegotiationInput in;
  in.requests = &p.requests;
  // One lookup of the set, not one per request (each would take the table's lock).
  const std::vector<int>& ranks = *sets_.member(p.processSetId).ranks;
  in.setRanks.reserve(p.requests.size());
  for (const auto& q : p.requests) in.setRanks.push_back(setRankIn(ranks, q.rank));
  if (readsEveryRank(p.requests.front().kind)) {
    forEachSetBit(p.twins.data(), p.twins.size(), [&](size_t r) {
      in.twinSetRanks.push_back(setRankIn(ranks, static_cast<int>(r)));
    });
  }
  in.setSize = static_cast<int>(ranks.size());
  in.someRanksJoined = someJoined;
  Response r = negotiateResponse(in);
  if (r.kind == OpKind::AddProcessSet || r.kind == OpKind::RemoveProcessSet) {
    finishProcessSetResponse(r);
  }
  if (r.kind == OpKind::Error) {
    int slot = cache_.slotOf(key);
    if (slot >= 0) evictSlot(slot);
  } else if (cacheable(r)) {
    assignSlot(key, p, r);
  }
  return r;
}

void Coordinator::assignSlot(const std::string& key, const PendingTensor& p, Response& r) {
  if (!cache_.enabled()) return;
  int slot = cache_.chooseSlot([this, &key](int s) {
    // A slot with pending reports belongs to a tensor some ranks wait on by bit.
    return cache_.key(s) == key || hits_.count(s) == 0;
  });
  if (slot < 0) return;
  if (cache_.occupied(slot)) {
    if (!warnedFull_) {
      HORA_LOG(Warning, "response cache is full (HORA_CACHE_CAPACITY="
                            << cache_.capacity()
                            << "); evicting least recently used entries. A larger capacity avoids "
                               "renegotiating tensors in full.");
      warnedFull_ = true;
    }
    evictSlot(slot);
  }
  r.cacheSlots = {slot};
  cache_.put(slot, key, p.requests.front(), r);
  slotChangedAt_[slot] = nextSequence_;
}

void Coordinator::finishProcessSetResponse(Response& r) {
  const std::string& name = r.names.front();
  if (r.kind == OpKind::AddProcessSet) {
    std::vector<int> ranks(r.processSet.ranks.begin(), r.processSet.ranks.end());
    int existing = sets_.findByRanks(ranks);
    if (existing >= 0) {
      r = errorResponse(
          name, 0, ResponseError::InvalidArgument,
          "a process set with these ranks already exists (id " + std::to_string(existing) + ")");
      return;
    }
    if (freedProcessSetIds_.empty()) {
      r.processSet.id = nextProcessSetId_++;
    } else {
      r.processSet.id = freedProcessSetIds_.front();
      freedProcessSetIds_.pop_front();
    }
    return;
  }
  int id = r.processSet.id;
  if (id <= 0 || !sets_.contains(id)) {
    r = errorResponse(
        name, 0, ResponseError::InvalidArgument,
        "cannot remove process set " + std::to_string(id) +
            (id == 0 ? ": the global process set cannot be removed" : ": no such process set"));
    return;
  }
  // Every rank applies this removal before any response built after it, so the id can name
  // the next set added.
  freedProcessSetIds_.push_back(id);
}

bool Coordinator::buildBatch(ResponseBatch* out) {
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& kv : pending_) {
    if (isReady(kv.second)) ready.emplace_back(kv.second.arrival, kv.first);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<Response> singles;
  for (const auto& rk : ready) {
    auto it = pending_.find(rk.second);
    if (timeline_ != nullptr) timeline_->negotiateEnd(it->second.processSetId, it->second.name);
    singles.push_back(respond(rk.second, it->second));
    if (it->second.slot >= 0) hits_.clear(it->second.slot);
    pending_.erase(it);
  }
  for (auto& r : immediate_) singles.push_back(std::move(r));
  immediate_.clear();
  if (singles.empty() && evictions_.empty() && !shutdown_ && newCycleTimeMs_ < 0 &&
      newFusionThreshold_ < 0) {
    return false;
  }
  if (autotuner_.active()) {
    for (const auto& r : singles) {
      if (r.kind != OpKind::Error) {
        autotuner_.recordBytes(
            fusionBytes(r, sets_.contains(r.processSetId) ? sets_.size(r.processSetId) : 1));
      }
    }
  }

  out->sequence = nextSequence_++;
  out->evictedSlots = std::move(evictions_);
  evictions_.clear();
  out->responses = planFusion(std::move(singles), settings_.fusionThreshold, [this](int setId) {
    return sets_.contains(setId) ? sets_.size(setId) : 1;
  });
  out->cycleTimeMs = newCycleTimeMs_;
  newCycleTimeMs_ = -1;
  out->fusionThreshold = newFusionThreshold_;
  newFusionThreshold_ = -1;
  out->shutdown = shutdown_;
  out->shutdownReason = shutdownReason_;
  return true;
}

}  // namespace hora
