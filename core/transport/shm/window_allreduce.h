#pragma once
// The window allreduce: an allreduce over the whole job in which the ranks reduce each other's
// data in place, in the shared segment, instead of passing it through the rings.
//
// Every rank owns a window of the segment, in two halves. The data goes through in parts of at
// most one half (the steps of window_steps.h); for part k:
//   1. each rank copies its part of the pieces into its half (the fusion copy, made once) and
//      publishes step 2k - 1. A rank whose part lies in one run of its arena area (arena.h:
//      gradients placed there by the frontend) copies nothing: it publishes where the part is,
//      and the others read it there. Nor does any rank copy its own slice (below) when that lies
//      in one run of its pieces: only it reads that slice;
//   2. once every rank did, each reduces its own slice of the part (an even split, as the ring's)
//      from every rank's half into its own half, then publishes step 2k. An own slice that was
//      not copied is read where it lies, and the result is written there too;
//   3. once every rank did, each copies every other slice from the half of the rank that reduced
//      it straight into its pieces.
// Every byte crosses memory a bounded number of times and no rank waits for a pipe to drain. Where
// the order of a floating-point fold matters (needsRankOrder), each slice is folded in rank order,
// so results are bit-identical to the rank-ordered algorithm and to the same tensors unfused.
#include <vector>

#include "core/common/dtype.h"
#include "core/transport/communicator.h"
#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

// links: a group of every rank of the segment, in order. count > 0 elements in pieces.
void windowAllreduce(ShmLinks& links, const std::vector<BufferPiece>& pieces, size_t count,
                     DataType dtype, ReduceOp op, bool rankOrder);

}  // namespace shm
}  // namespace hora
