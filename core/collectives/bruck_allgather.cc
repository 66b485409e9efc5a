// Bruck allgatherv: every rank's block reaches every rank in ceil(log2 N) rounds for any N, where
// the ring takes N - 1 steps. A rank keeps the blocks it has in relative order (block i is rank
// r + i's), so what it holds is always one run from its own block on. In the round of distance d
// (1, 2, 4, ...; d blocks held) it sends its first min(d, N - d) blocks to rank r - d and receives
// as many from rank r + d, whose first blocks are the ranks that follow this rank's last one. The
// sizes of all blocks are known to every rank, so each round is one message each way. Bytes sent
// per rank: the N - 1 other blocks, as for the ring.
#include <cstring>
#include <vector>

#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"

namespace hora {
namespace collectives {

void allgathervBruck(Links& links, const void* in, void* out,
                     const std::vector<size_t>& bytesPerRank) {
  const int n = links.size(), r = links.rank();
  // held[i]: where rank r + i's block starts in the relative staging; held[n]: the total.
  std::vector<size_t> held(n + 1, 0);
  for (int i = 0; i < n; ++i) held[i + 1] = held[i] + bytesPerRank[wrapRank(r + i, n)];
  uint8_t* staging = links.scratch(kScratchRecv, held[n] + 1);
  std::memcpy(staging, in, bytesPerRank[r]);
  for (int d = 1; d < n; d *= 2) {
    const int blocks = std::min(d, n - d);
    Transfer t[2] = {{wrapRank(r - d, n), true, staging, held[blocks]},
                     {wrapRank(r + d, n), false, staging + held[d], held[d + blocks] - held[d]}};
    runTransfers(links, t, 2);
  }
  auto* dst = static_cast<uint8_t*>(out);
  const std::vector<size_t> at = startsOf(bytesPerRank);
  for (int i = 0; i < n; ++i) {
    const int rank = wrapRank(r + i, n);
    if (bytesPerRank[rank] > 0) std::memcpy(dst + at[rank], staging + held[i], bytesPerRank[rank]);
  }
}

}  // namespace collectives
}  // namespace hora
