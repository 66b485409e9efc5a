// Allreduce in rank order: every element is reduced as ((v0 op v1) op v2) ..., whatever the size of
// the buffer or the element's position in it. Floating-point sums and products depend on order, so
// this is what makes a fused buffer give bit-identical results to its tensors run one by one (and
// a tensor the same result whichever algorithm its size would pick) on three ranks or more.
//
// Block b of the buffer belongs to rank b. Every rank sends block b to rank b and receives its own
// block from every peer (one round, all pipes at once), folds the n contributions in rank order,
// then a ring allgather hands every rank every block. Bytes sent per rank: 2(n-1)/n of the buffer,
// as for the ring.
#include <cstring>
#include <vector>

#include "core/common/reduce.h"
#include "core/transport/tcp/algorithms.h"

namespace hora {

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
  const size_t mine = bytes[r];
  // Peers' copies of this rank's block, one slot per peer, then the fold's working copy.
  uint8_t* received = links.scratch(kScratchRecv, mine * n + 1);
  uint8_t* work = received + mine * (n - 1);

  std::vector<Transfer> transfers;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    int slot = p < r ? p : p - 1;
    transfers.push_back({p, true, base + offsets[p], bytes[p]});
    transfers.push_back({p, false, received + slot * mine, mine});
  }
  runTransfers(links, transfers.data(), transfers.size());

  auto contribution = [&](int p) -> const uint8_t* {
    if (p == r) return base + offsets[r];
    return received + (p < r ? p : p - 1) * mine;
  };
  if (mine > 0) {
    std::memcpy(work, contribution(0), mine);
    for (int p = 1; p < n; ++p) reduceInto(work, contribution(p), counts[r], dtype, op);
    std::memcpy(base + offsets[r], work, mine);
  }
  allgathervRing(links, base + offsets[r], base, bytes);
}

}  // namespace hora
