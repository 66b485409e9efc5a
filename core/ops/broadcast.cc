#include <algorithm>

#include "core/common/errors.h"
#include "core/ops/ops.h"

namespace hora {

void runBroadcast(const Response& r, OpContext& cx) {
  auto it = std::lower_bound(cx.setRanks.begin(), cx.setRanks.end(), r.rootRank);
  HORA_CHECK(it != cx.setRanks.end() && *it == r.rootRank, "broadcast root outside the set");
  int root = static_cast<int>(it - cx.setRanks.begin());
  ActivityScope a(cx, r, TransportActivity{"BCAST"});
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    TensorEntry* e = cx.entries[t];
    HORA_CHECK(e != nullptr, "broadcast without a local tensor");
    cx.comm.broadcast(e->tensor.data, e->tensor.bytes(), root);
  }
}

}  // namespace hora
