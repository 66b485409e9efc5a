#include "core/transport/capabilities.h"

namespace hora {

Capabilities Capabilities::cpuComplete() {
  Capabilities c;
  c.ops.set();
  // Only the element-wise ops: Average is Sum then scaling, and Adasum has its own algorithm, so no
  // transport reduces them directly.
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    c.reduceOps.set(static_cast<size_t>(op));
  }
  c.dtypes.set();
  return c;
}

}  // namespace hora
