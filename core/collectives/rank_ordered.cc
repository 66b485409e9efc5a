// Allreduce in rank order: every element is reduced as ((v0 op v1) op v2) ..., whatever the size of
// the buffer or the element's position in it. Floating-point sums and products depend on order, so
// this is what makes a fused buffer give bit-identical results to its tensors run one by one (and
// a tensor the same result whichever algorithm its size would pick) on three ranks or more.
//
// Block b of the buffer belongs to rank b. Every rank sends block b to rank b and receives its own
// block from every peer, all pipes at once, in segments of kRingSegmentBytes: segment k of every
// block travels in round k and is folded in rank order as soon as it is in, while it is still in
// cache. A ring allgather then hands every rank every block. Bytes sent per rank: 2(n-1)/n of the
// buffer, as for the ring.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {

void allreduceRankOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  const int n = links.size(), r = links.rank();
  const size_t elem = dtypeSize(dtype);
  std::vector<size_t> counts(n), bytes(n), offsets(n);
  size_t off = 0;
  for (int b = 0; b < n; ++b) {
    counts[b] = count / n + (static_cast<size_t>(b) < count % n ? 1 : 0);
    bytes[b] = counts[b] * elem;
    offsets[b] = off;
    off += bytes[b];
  }
  auto* base = static_cast<uint8_t*>(buf);
  const size_t segElems = std::max<size_t>(1, kRingSegmentBytes / elem);
  const size_t segBytes = segElems * elem;
  const size_t rounds = (counts[0] + segElems - 1) / segElems;  // block 0 is the largest
  // One segment from each peer. Peer p's slot is p, or p - 1 above this rank.
  uint8_t* received = links.scratch(kScratchRecv, segBytes * (n - 1) + 1);
  auto slot = [&](int p) { return received + static_cast<size_t>(p < r ? p : p - 1) * segBytes; };

  std::vector<Transfer> transfers;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t first = k * segElems;
    auto segment = [&](int b) {
      return first < counts[b] ? std::min(segElems, counts[b] - first) : 0;
    };
    transfers.clear();
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      if (size_t m = segment(p))
        transfers.push_back({p, true, base + offsets[p] + first * elem, m * elem});
      if (size_t m = segment(r)) transfers.push_back({p, false, slot(p), m * elem});
    }
    runTransfers(links, transfers.data(), transfers.size());

    const size_t m = segment(r);
    if (m == 0) continue;
    uint8_t* own = base + offsets[r] + first * elem;
    // Fold into rank 0's contribution: this rank's own block on rank 0, a received slot elsewhere.
    uint8_t* acc = r == 0 ? own : slot(0);
    for (int p = 1; p < n; ++p) reduceInto(acc, p == r ? own : slot(p), m, dtype, op);
    if (acc != own) std::memcpy(own, acc, m * elem);
  }
  allgathervRing(links, base + offsets[r], base, bytes);
}

}  // namespace collectives
}  // namespace hora
