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
// what the backend that will carry the tensor runs: the data transport's communicators
// (Communicator::capabilities()) for CPU tensors, the device backend's
// (core/transport/device_backend.h) for tensors on a device.
//
// A tensor on a device is first checked against the device backend's limits, before anything
// else: InvalidArgument when its path is off (naming why) or the device does not exist;
// NotSupported for Adasum, for reductions of dtypes it cannot reduce, and for prescale/postscale
// factors other than 1 where it does not scale (`hierarchical`: the request's process set runs
// its allreduces hierarchically, which may scale where the flat path does not).
#include "core/coordinator/process_set_table.h"
#include "core/messages/messages.h"
#include "core/transport/capabilities.h"

namespace hora {

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets,
                             const Capabilities& data, bool hierarchical = false);

}  // namespace hora
