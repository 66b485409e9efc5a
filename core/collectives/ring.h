#pragma once
// The transport-neutral pipelined ring engine (over Links) behind ring allreduce, reduce-scatter,
// allgatherv and the chain broadcast. A RingPlan is a list of steps; in each step a rank sends one
// block to sendPeer and receives one block from recvPeer, copying or reducing it into place.
//
// Steps are not run in lockstep: the send cursor and the receive cursor advance independently,
// and the only dependency is that step t may send the bytes of its block that step t-1 has
// already received (the block a rank forwards is the one it just received). Those bytes leave in
// kRingSegmentBytes segments, so the segments of consecutive steps overlap on the wire and a
// send and a receive are always in flight together (full duplex on non-blocking pipes).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/collectives/links.h"
#include "core/common/dtype.h"

namespace hora {
namespace collectives {

struct RingStep {
  int sendBlock = -1;   // -1: nothing to send in this step
  int recvBlock = -1;   // -1: nothing to receive
  bool reduce = false;  // reduce the received block into place instead of copying it
};

struct RingPlan {
  int sendPeer = -1;
  int recvPeer = -1;
  uint8_t* base = nullptr;
  std::vector<size_t> blockOffset;  // bytes from base
  std::vector<size_t> blockBytes;
  std::vector<RingStep> steps;
  DataType dtype = DataType::UInt8;  // for reducing steps
  ReduceOp op = ReduceOp::Sum;
  size_t elementSize = 1;
};

void runRing(Links& links, const RingPlan& plan);

// i modulo n, in [0, n) also for negative i: rank arithmetic around a ring.
inline int wrapRank(int i, int n) { return ((i % n) + n) % n; }

// Where each of the blocks of `bytes`, laid out one after another, starts.
inline std::vector<size_t> startsOf(const std::vector<size_t>& bytes) {
  std::vector<size_t> at(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) at[i] = at[i - 1] + bytes[i - 1];
  return at;
}

// Splits count elements into `parts` blocks as evenly as possible (the first count % parts blocks
// get one more) and fills byte offsets and sizes.
void splitEvenly(size_t count, int parts, size_t elementSize, std::vector<size_t>* offsets,
                 std::vector<size_t>* bytes);

}  // namespace collectives
}  // namespace hora
