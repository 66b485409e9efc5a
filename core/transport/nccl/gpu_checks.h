#pragma once
// Enqueue-time checks of a request whose tensor lives on a CUDA device, so that what the GPU
// path cannot run fails in the caller's thread with a clear message instead of in a collective.
#include "core/messages/messages.h"
#include "core/transport/nccl/gpu_library.h"

namespace hora::gpu {

// Throws InvalidArgument when the GPU path is off (naming why) or the device does not exist;
// NotSupported for Adasum, for reductions of dtypes NCCL cannot reduce (int16, uint16, bool;
// bfloat16 before NCCL 2.10) and for prescale/postscale factors other than 1, except for an
// allreduce that runs hierarchically (`hierarchical`: the request's process set runs its
// allreduces so), which scales on the host.
void checkGpuRequest(const OpRequest& op, const GpuLibrary& lib, bool hierarchical = false);

}  // namespace hora::gpu
