#pragma once
// Device memory of the GPU path: allocation through the loaded CUDA runtime, and the persistent
// device fusion buffer. Background thread only.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/common/tensor.h"
#include "core/transport/nccl/gpu_library.h"

namespace hora::gpu {

// Device memory shared like OutputTensor::storage: freed with cudaFree when the last owner goes.
std::shared_ptr<uint8_t> allocateDevice(const GpuLibrary& lib, size_t bytes);

// An engine-allocated result on `device` (allgather, alltoall, reducescatter).
OutputTensor allocateDeviceOutput(const GpuLibrary& lib, int device, DataType dtype,
                                  std::vector<int64_t> shape);

// Grows to the largest size asked for and is reused. Work still queued on the stream may read
// the old allocation, so a replaced one is kept until releaseRetired() (called when no work is
// pending).
class DeviceFusionBuffer {
 public:
  uint8_t* reserve(const GpuLibrary& lib, size_t bytes);
  void releaseRetired() { retired_.clear(); }

 private:
  std::shared_ptr<uint8_t> data_;
  size_t capacity_ = 0;
  std::vector<std::shared_ptr<uint8_t>> retired_;
};

}  // namespace hora::gpu
