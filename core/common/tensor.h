#pragma once
// Neutral tensor views and engine-owned output buffers. Frontends describe their tensors with a
// TensorView (built from DLPack in bindings/); the engine never knows which framework owns it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/device.h"
#include "core/common/dtype.h"

namespace hora {

struct TensorView {
  void* data = nullptr;  // host memory on the CPU, device memory on a GPU
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  Device device = Device::cpu();  // initialised here, so {data, dtype, shape} needs no device

  // GPU tensors are produced asynchronously on a stream. readyEvent is the producer's event
  // (a cudaEvent_t) and stream its stream (a cudaStream_t), as opaque handles; both are null for
  // CPU tensors. No code may read a GPU buffer before this event has completed: a GPU transport
  // waits for it, or orders its own stream after it, before touching data.
  void* readyEvent = nullptr;
  void* stream = nullptr;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
};

std::string shapeString(const std::vector<int64_t>& shape);  // "[17, 17]"

// Memory the engine allocates for results whose size is known only after negotiation (allgather,
// alltoall, reducescatter). 64-byte aligned; shared so the bindings can hand it to Python
// zero-copy and free it when the last view dies.
struct OutputTensor {
  std::shared_ptr<uint8_t> storage;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  Device device = Device::cpu();  // a GPU output's storage is device memory (gpu_executor.h)

  void* data() const { return storage.get(); }
  static OutputTensor allocate(DataType dtype, std::vector<int64_t> shape);
};

}  // namespace hora
