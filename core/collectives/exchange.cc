// Point-to-point building blocks (runTransfers) and the collectives made directly of them:
// pairwise alltoallv and the dissemination barrier.
#include "core/collectives/algorithms.h"

#include <cstring>

#include "core/collectives/ring.h"

namespace hora {
namespace collectives {

void runTransfers(Links& links, Transfer* transfers, size_t count) {
  std::vector<Links::Want> wants;
  for (;;) {
    bool pending = false, moved = false;
    wants.clear();
    for (size_t i = 0; i < count; ++i) {
      Transfer& t = transfers[i];
      if (t.done >= t.bytes) continue;
      pending = true;
      // One stream per (peer, direction): a later transfer on it waits for the earlier ones.
      bool queued = false;
      for (size_t j = 0; j < i && !queued; ++j) {
        const Transfer& e = transfers[j];
        queued = e.done < e.bytes && e.peer == t.peer && e.send == t.send;
      }
      if (queued) continue;
      auto* p = static_cast<uint8_t*>(t.data) + t.done;
      size_t left = t.bytes - t.done;
      size_t n = t.send ? links.trySend(t.peer, p, left) : links.tryRecv(t.peer, p, left);
      t.done += n;
      moved |= n > 0;
      if (t.done < t.bytes) wants.push_back({t.peer, t.send, !t.send});
    }
    if (!pending) return;
    if (!moved) links.waitAny(wants.data(), wants.size());
  }
}

void alltoallvPairwise(Links& links, const void* in, const std::vector<size_t>& sendBytes,
                       void* out, const std::vector<size_t>& recvBytes) {
  int n = links.size(), r = links.rank();
  const std::vector<size_t> sendAt = startsOf(sendBytes), recvAt = startsOf(recvBytes);
  auto* src = static_cast<uint8_t*>(const_cast<void*>(in));
  auto* dst = static_cast<uint8_t*>(out);
  if (recvBytes[r] > 0) std::memmove(dst + recvAt[r], src + sendAt[r], recvBytes[r]);
  for (int step = 1; step < n; ++step) {
    int to = (r + step) % n;
    int from = (r - step + n) % n;
    Transfer t[2] = {{to, true, src + sendAt[to], sendBytes[to]},
                     {from, false, dst + recvAt[from], recvBytes[from]}};
    runTransfers(links, t, 2);
  }
}

void barrierDissemination(Links& links) {
  int n = links.size(), r = links.rank();
  for (int distance = 1; distance < n; distance <<= 1) {
    uint8_t token = 1, received = 0;
    Transfer t[2] = {{(r + distance) % n, true, &token, 1},
                     {(r - distance + n) % n, false, &received, 1}};
    runTransfers(links, t, 2);
  }
}

}  // namespace collectives
}  // namespace hora
