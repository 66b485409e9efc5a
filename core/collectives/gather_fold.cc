// Gather-and-fold allreduce: every rank gathers every rank's whole buffer (a Bruck allgather,
// ceil(log2 N) rounds for any N) and folds them itself in rank order. It gives the same bits as
// the rank-ordered allreduce (rank_ordered.cc), ((v0 op v1) op v2) ..., in log2(N) rounds
// instead of that one's N rounds (its ring allgather), at the price of receiving (N-1) buffers:
// the choice for small buffers when the order matters (algorithm_table.h), as the shared payload
// is on shared memory.
#include <cstring>

#include "core/collectives/algorithms.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {

void allreduceGatherFold(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  const int n = links.size(), r = links.rank();
  if (n == 1 || count == 0) return;
  const size_t bytes = count * dtypeSize(dtype);
  // Block i holds rank (r + i) % n's buffer; block 0 is this rank's.
  uint8_t* blocks = links.scratch(kScratchRecv, bytes * n);
  std::memcpy(blocks, buf, bytes);
  // Round with distance d: the first d blocks go to rank r - d, the next ones come from rank
  // r + d (its first blocks are the ranks that follow this rank's last one).
  int have = 1;
  for (int d = 1; have < n; d *= 2) {
    const int blocksNow = std::min(d, n - have);
    Transfer t[2] = {{(r - d + n) % n, true, blocks, blocksNow * bytes},
                     {(r + d) % n, false, blocks + have * bytes, blocksNow * bytes}};
    runTransfers(links, t, 2);
    have += blocksNow;
  }
  auto blockOf = [&](int rank) { return blocks + static_cast<size_t>((rank - r + n) % n) * bytes; };
  std::memcpy(buf, blockOf(0), bytes);
  for (int p = 1; p < n; ++p) reduceInto(buf, blockOf(p), count, dtype, op);
}

}  // namespace collectives
}  // namespace hora
