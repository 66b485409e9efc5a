#pragma once
// NcclDeviceBackend: the GPU path as a DeviceBackend (core/transport/device_backend.h), its
// capabilities read once from the process's CUDA runtime and NCCL (gpu_library.h).
#include <string>

#include "core/transport/device_backend.h"

namespace hora::gpu {

class NcclDeviceBackend final : public DeviceBackend {
 public:
  NcclDeviceBackend();
  std::string name() const override { return "nccl"; }
  const Capabilities& capabilities() const override { return caps_; }

 private:
  Capabilities caps_;
};

}  // namespace hora::gpu
