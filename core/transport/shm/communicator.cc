#include "core/transport/shm/communicator.h"

#include <cstring>

#include "core/collectives/algorithm_table.h"
#include "core/common/reduce.h"
#include "core/transport/shm/window_allreduce.h"
#include "core/transport/shm/window_gather.h"

namespace hora {
namespace shm {

ShmCommunicator::ShmCommunicator(std::shared_ptr<ShmPeers> peers, std::vector<int> worldRanks,
                                 int rank)
    : peers_(peers), links_(std::move(peers), std::move(worldRanks), rank) {
  wholeJob_ = links_.size() == peers_->worldSize;
  for (int i = 0; i < links_.size(); ++i) {
    // The per-rank lines and windows of the segment are indexed by world rank, so only a group that
    // is the whole segment, in order, may use them directly.
    if (links_.worldRank(i) != i) wholeJob_ = false;
    if (i != rank) others_.push_back(i);
  }
}

std::unique_ptr<Communicator> ShmCommunicator::subset(const std::vector<int>& ranks) {
  int mine = checkSubset(ranks);
  std::vector<int> world;
  for (int r : ranks) world.push_back(links_.worldRank(r));
  return std::make_unique<ShmCommunicator>(peers_, std::move(world), mine);
}

bool ShmCommunicator::rankOrder(DataType dtype, ReduceOp op) const {
  return collectives::needsRankOrder(isFloating(dtype),
                                     op == ReduceOp::Sum || op == ReduceOp::Product, size());
}

collectives::AllreduceAlgorithm ShmCommunicator::algorithm(size_t count, DataType dtype,
                                                           ReduceOp op) const {
  // Passing wholeJob_ as sharedPayloads keeps subsets off the payload lines and blocks, which
  // belong to the whole segment.
  return collectives::chooseAllreduce(count * dtypeSize(dtype), count, size(), rankOrder(dtype, op),
                                      wholeJob_, windows());
}

bool ShmCommunicator::reducesPieces(size_t count, DataType dtype, ReduceOp op) const {
  return size() > 1 && count > 0 && capabilities().reduces(op) &&
         algorithm(count, dtype, op) == collectives::AllreduceAlgorithm::Window;
}

void ShmCommunicator::allreducePieces(const std::vector<BufferPiece>& pieces, size_t count,
                                      DataType dtype, ReduceOp op) {
  // Callers must ask reducesPieces() first; every rank answers it alike, so all of them take this
  // path or none does.
  HORA_CHECK(reducesPieces(count, dtype, op), "allreducePieces without a window");
  run("allreduce",
      [&] { windowAllreduce(links_, pieces, count, dtype, op, rankOrder(dtype, op)); });
}

std::shared_ptr<SharedPool> ShmCommunicator::sharedPool() const {
  if (!windows()) return nullptr;
  return peers_->segment.arena();
}

bool ShmCommunicator::allreduceDirect(void* buf, size_t count, DataType dtype, ReduceOp op) {
  switch (algorithm(count, dtype, op)) {
    case collectives::AllreduceAlgorithm::SharedPayload:
      allreduceSharedPayload(buf, count, dtype, op);
      return true;
    case collectives::AllreduceAlgorithm::Window:
      windowAllreduce(links_, {{buf, count * dtypeSize(dtype)}}, count, dtype, op,
                      rankOrder(dtype, op));
      return true;
    default: return false;
  }
}

bool ShmCommunicator::broadcastDirect(void* buf, size_t bytes, int root) {
  if (!windows() || bytes < collectives::kWindowBroadcastMinBytes) return false;
  // A broadcast is a gather in which only the root contributes bytes: everyone else's range is
  // empty, and every rank reads the root's data from its window into buf.
  std::vector<size_t> sizes(size(), 0);
  sizes[root] = bytes;
  windowGather(links_, buf, bytes, std::vector<size_t>(size(), 0), sizes, buf);
  return true;
}

// Payload k goes to parity k & 1 of the rank's lines, or of its payload blocks when larger than a
// line holds. A rank reads a peer's payload k only after seeing its seq >= k, and no rank can
// publish k + 2 (overwriting parity k & 1) before every rank has published k + 1, which each does
// only after reading payload k.
void ShmCommunicator::allreduceSharedPayload(void* buf, size_t count, DataType dtype, ReduceOp op) {
  ShmPeers& p = *peers_;
  const Segment& s = p.segment;
  const size_t bytes = count * dtypeSize(dtype);
  const uint32_t k = ++p.lineSeq;
  auto slot = [&](int r) -> uint8_t* {
    RankBlock& b = s.rank(r);
    if (bytes > kLinePayloadBytes) return b.payloads[k & 1];
    return (k & 1) ? b.spare.payload : b.line.payload;
  };
  // The payload is written before seq is stored with release, so a peer that acquires the new seq
  // reads a complete payload.
  std::memcpy(slot(p.worldRank), buf, bytes);
  s.rank(p.worldRank).line.seq.store(k, std::memory_order_release);
  for (int r = 0; r < p.worldSize; ++r) {
    if (r != p.worldRank) ring(p.doorbell(r));
  }
  auto published = [&](int r) {
    // The signed difference keeps the comparison right when the 32-bit counter wraps.
    return static_cast<int32_t>(s.rank(r).line.seq.load(std::memory_order_acquire) - k) >= 0;
  };
  auto ready = [&] {
    for (int r : others_) {
      if (!published(r)) return false;
    }
    return true;
  };
  auto missing = [&] {
    std::string out;
    for (int r : others_) {
      if (!published(r)) out += (out.empty() ? "" : ", ") + std::to_string(peers_->jobRank(r));
    }
    return "waiting for the payload of rank " + out;
  };
  // A rank that published its payload and then left (the job ending) does not fail this wait.
  links_.waitFor(ready, others_, missing, [&](int r) { return !published(r); });
  // Every rank folds the payloads in the same order, rank 0 first, so all ranks get bit-identical
  // results even for floating point. Its own is in its slot: buf may take the fold.
  std::memcpy(buf, slot(0), bytes);
  for (int r = 1; r < p.worldSize; ++r) reduceInto(buf, slot(r), count, dtype, op);
}

}  // namespace shm
}  // namespace hora
