// Recursive-doubling allreduce, the small-message allreduce (see algorithm_table.h).
#include "core/collectives/algorithms.h"

#include "core/common/reduce.h"

namespace hora {
namespace collectives {

void allreduceRecursiveDoubling(Links& links, void* buf, size_t count, DataType dtype,
                                ReduceOp op) {
  int n = links.size(), r = links.rank();
  if (n == 1 || count == 0) return;
  size_t bytes = count * dtypeSize(dtype);
  uint8_t* incoming = links.scratch(kScratchRecv, bytes);

  // Largest power of two not above n; the first 2 * extra ranks pair up so that `pow2` remain.
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  int extra = n - pow2;
  // Number of this rank among the remaining pow2, or -1 when it folded its data into a partner.
  int vrank;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      Transfer t{r + 1, true, buf, bytes};
      runTransfers(links, &t, 1);
      vrank = -1;
    } else {
      Transfer t{r - 1, false, incoming, bytes};
      runTransfers(links, &t, 1);
      reduceInto(buf, incoming, count, dtype, op);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }

  if (vrank >= 0) {
    for (int mask = 1; mask < pow2; mask <<= 1) {
      int partner = vrank ^ mask;
      int peer = partner < extra ? partner * 2 + 1 : partner + extra;
      // Both partners send and receive at once; the reduction waits for both to finish because
      // the outgoing bytes come from buf.
      Transfer t[2] = {{peer, true, buf, bytes}, {peer, false, incoming, bytes}};
      runTransfers(links, t, 2);
      reduceInto(buf, incoming, count, dtype, op);
    }
  }

  if (r < 2 * extra) {
    Transfer t =
        r % 2 == 0 ? Transfer{r + 1, false, buf, bytes} : Transfer{r - 1, true, buf, bytes};
    runTransfers(links, &t, 1);
  }
}

}  // namespace collectives
}  // namespace hora
