#include "core/transport/device_backend.h"

#include "core/common/errors.h"
#include "core/transport/nccl/device_backend.h"

namespace hora {

const DeviceBackend& deviceBackendFor(DeviceKind kind) {
  if (kind == DeviceKind::Cuda) {
    // Made on the first CUDA request, not at start-up: a job without GPU tensors never opens
    // the CUDA runtime or NCCL.
    static const gpu::NcclDeviceBackend nccl;
    return nccl;
  }
  throw InvalidArgument("no device backend carries tensors on the CPU; the transports do");
}

}  // namespace hora
