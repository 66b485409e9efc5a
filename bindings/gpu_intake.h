#pragma once
// The intake side of GPU tensors: where a CUDA tensor's readiness is captured at enqueue.
//
// Each device has one intake stream, made on first use and kept for the life of the process. At
// enqueue the producer is asked to order that stream after its own work (DLPack's
// `__dlpack__(stream=...)` contract: torch records an event on its current stream and makes the
// given stream wait on it), then a fresh ready event is recorded on the intake stream. The engine
// makes its own stream wait on that event before it touches the data
// (core/ops/gpu_executor.h), and destroys the event when the work is done. No host sync happens.
//
// GIL held (the map of intake streams is guarded by it).
#include "core/transport/nccl/gpu_library.h"

namespace hora::bindings {

// The loaded GPU library; throws InvalidArgument naming why the GPU path is off.
const gpu::GpuLibrary& requireGpu(int device);

// The intake stream of `device`, as the integer DLPack's `stream=` takes.
gpu::cudaStream_t intakeStream(int device);

// A new event recorded on the intake stream of `device` (now ordered after the producer).
gpu::cudaEvent_t recordReadyEvent(int device);

}  // namespace hora::bindings
