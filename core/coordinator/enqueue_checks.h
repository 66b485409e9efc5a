#pragma once
// The one place a submitted request is checked against what this rank knows locally, before it
// is queued; it also completes the Request for negotiation (sender rank; dtype, shape and device
// of the tensor; Adasum as its own kind; equal alltoall splits spelled out). Everything decidable
// without the other ranks fails here, at once, in the caller's thread: unknown reduce op, unknown
// or foreign process set, unsupported dtype or device, bad root, bad splits, scalars where rows
// are needed. Agreement across ranks is the coordinator's (validation.h).
//
// Messages are Horovod's where Horovod has one (scripts and Horovod's tests match them), opening
// with the operation ("allreduce: ...") and naming the tensor. Errors: InvalidArgument (Python's
// ValueError); InvalidCollectiveError where Horovod raises HorovodInternalError (a reducescatter
// op other than Sum/Average, alltoall splits that do not fit the set or the tensor). `data` is
// what the data transport's communicators run (Communicator::capabilities()).
#include "core/coordinator/process_set_table.h"
#include "core/messages/messages.h"
#include "core/transport/capabilities.h"

namespace hora {

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets,
                             const Capabilities& data);

}  // namespace hora
