#pragma once
// Checks a frontend request against what this rank knows locally and completes its Request for
// negotiation (sender rank; dtype, shape and device of the tensor; Adasum as its own kind; equal
// alltoall splits spelled out). Everything decidable without the other ranks fails here, at once,
// in the caller's thread (InvalidArgument -> ValueError in Python): unknown or foreign process set,
// unsupported dtype or device, bad root, bad splits, scalars where rows are needed. `data` is
// what the data transport's communicators run (Communicator::capabilities()).
#include "core/coordinator/process_set_table.h"
#include "core/messages/messages.h"
#include "core/transport/capabilities.h"

namespace hora {

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets,
                             const Capabilities& data);

}  // namespace hora
