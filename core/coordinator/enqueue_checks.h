#pragma once
// Checks a frontend request against what this rank knows locally and completes its Request for
// negotiation (sender rank; dtype, shape and device of the tensor; Adasum as its own kind; equal
// alltoall splits spelled out). Everything decidable without the other ranks fails here, at once, in the
// caller's thread (InvalidArgument -> ValueError in Python): unknown or foreign process set,
// unsupported dtype or device, bad root, bad splits, scalars where rows are needed.
#include "core/coordinator/messages.h"
#include "core/coordinator/process_set_table.h"

namespace hora {

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets);

}  // namespace hora
