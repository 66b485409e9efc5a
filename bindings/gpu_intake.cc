#include "bindings/gpu_intake.h"

#include <map>

#include "core/common/errors.h"

namespace hora::bindings {

const gpu::GpuLibrary& requireGpu(int device) {
  const gpu::GpuLibrary& lib = gpu::gpuLibrary();
  if (!lib.available()) {
    throw InvalidArgument("tensor is on GPU " + std::to_string(device) +
                          ", but the GPU path of Hora is off: " + lib.reason());
  }
  if (device < 0 || device >= lib.deviceCount()) {
    throw InvalidArgument("tensor is on GPU " + std::to_string(device) + ", but CUDA reports " +
                          std::to_string(lib.deviceCount()) + " devices");
  }
  return lib;
}

gpu::cudaStream_t intakeStream(int device) {
  // Never destroyed: streams must outlive every tensor enqueued on them, up to process exit.
  static auto* streams = new std::map<int, gpu::cudaStream_t>();
  auto it = streams->find(device);
  if (it != streams->end()) return it->second;
  const gpu::GpuLibrary& lib = requireGpu(device);
  int previous = 0;
  lib.cuda().getDevice(&previous);
  gpu::checkCuda(lib.cuda().setDevice(device), "cudaSetDevice");
  gpu::cudaStream_t s = nullptr;
  gpu::checkCuda(lib.cuda().streamCreateWithFlags(&s, gpu::kStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
  lib.cuda().setDevice(previous);
  (*streams)[device] = s;
  return s;
}

gpu::cudaEvent_t recordReadyEvent(int device) {
  const gpu::GpuLibrary& lib = requireGpu(device);
  gpu::cudaEvent_t ev = nullptr;
  gpu::checkCuda(lib.cuda().eventCreateWithFlags(&ev, gpu::kEventDisableTiming),
                 "cudaEventCreateWithFlags");
  gpu::checkCuda(lib.cuda().eventRecord(ev, intakeStream(device)), "cudaEventRecord");
  return ev;
}

}  // namespace hora::bindings
