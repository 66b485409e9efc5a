#pragma once
// OpRequest: what a frontend asks the runtime for, one tensor, before any check. The runtime's
// enqueue() checks it against what this rank knows (enqueue_checks.h) and turns it into the
// Request that is negotiated.
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/dtype.h"
#include "core/common/tensor.h"
#include "core/coordinator/messages.h"

namespace hora {

struct OpRequest {
  OpKind kind = OpKind::Allreduce;
  std::string name;
  int processSetId = 0;
  TensorView tensor;            // input; for allreduce/broadcast/adasum also the output (in place)
  ReduceOp reduceOp = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int rootRank = 0;             // world rank
  std::vector<int32_t> splits;  // alltoall (empty = equal split)
  std::string callSite;
};

}  // namespace hora
