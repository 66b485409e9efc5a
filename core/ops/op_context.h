#pragma once
// What an op needs to execute one (possibly fused) response on this rank.
#include <vector>

#include "core/coordinator/messages.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_buffer.h"
#include "core/transport/communicator.h"

namespace hora {

struct OpContext {
  Communicator& comm;                 // the process set's communicator
  FusionBuffer& fusion;
  const std::vector<int>& setRanks;   // world rank of each set rank
  // One per tensor of the response, in order; nullptr where this rank joined and contributes
  // zeros (allreduce only).
  std::vector<TensorEntry*> entries;
};

}  // namespace hora
