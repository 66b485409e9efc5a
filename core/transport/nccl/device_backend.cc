#include "core/transport/nccl/device_backend.h"

#include "core/transport/nccl/communicator.h"
#include "core/transport/nccl/gpu_library.h"

namespace hora::gpu {

NcclDeviceBackend::NcclDeviceBackend() : caps_(NcclCommunicator::gpuCapabilities(gpuLibrary())) {}

}  // namespace hora::gpu
