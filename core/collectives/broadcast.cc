// Broadcast algorithms: binomial tree for small buffers, pipelined chain for large ones.
#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"

namespace hora {
namespace collectives {

void broadcastBinomial(Links& links, void* buf, size_t bytes, int root) {
  int n = links.size();
  if (n == 1 || bytes == 0) return;
  int vrank = wrapRank(links.rank() - root, n);
  // Receive from the parent: the virtual rank with its lowest set bit cleared.
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      Transfer t{wrapRank(vrank - mask + root, n), false, buf, bytes};
      runTransfers(links, &t, 1);
      break;
    }
    mask <<= 1;
  }
  // Send to the children: virtual ranks vrank + m for every m below that bit, largest first.
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) {
      Transfer t{wrapRank(vrank + mask + root, n), true, buf, bytes};
      runTransfers(links, &t, 1);
    }
  }
}

void broadcastChain(Links& links, void* buf, size_t bytes, int root) {
  int n = links.size(), r = links.rank();
  if (n == 1 || bytes == 0) return;
  int vrank = wrapRank(r - root, n);
  RingPlan plan;
  plan.sendPeer = wrapRank(r + 1, n);
  plan.recvPeer = wrapRank(r - 1, n);
  plan.base = static_cast<uint8_t*>(buf);
  plan.blockOffset = {0};
  plan.blockBytes = {bytes};
  // Root: send. Last in the chain: receive. Others: receive, and forward each segment as it lands.
  if (vrank > 0) plan.steps.push_back({-1, 0, false});
  if (vrank < n - 1) plan.steps.push_back({0, -1, false});
  runRing(links, plan);
}

}  // namespace collectives
}  // namespace hora
