#include "core/transport/nccl/device_buffer.h"

#include <algorithm>

namespace hora::gpu {

std::shared_ptr<uint8_t> allocateDevice(const GpuLibrary& lib, size_t bytes) {
  void* p = nullptr;
  checkCuda(lib.cuda().malloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
  const CudaApi* cuda = &lib.cuda();
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [cuda](uint8_t* q) { cuda->free(q); });
}

OutputTensor allocateDeviceOutput(const GpuLibrary& lib, int device, DataType dtype,
                                  std::vector<int64_t> shape) {
  OutputTensor out;
  out.dtype = dtype;
  out.shape = std::move(shape);
  out.device = Device::cuda(device);
  int64_t n = 1;
  for (int64_t d : out.shape) n *= d;
  out.storage = allocateDevice(lib, static_cast<size_t>(n) * dtypeSize(dtype));
  return out;
}

uint8_t* DeviceFusionBuffer::reserve(const GpuLibrary& lib, size_t bytes) {
  if (bytes > capacity_ || !data_) {
    if (data_) retired_.push_back(std::move(data_));
    size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
    data_ = allocateDevice(lib, grown);
    capacity_ = grown;
  }
  return data_.get();
}

}  // namespace hora::gpu
