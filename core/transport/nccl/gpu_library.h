#pragma once
// GpuLibrary: the CUDA runtime and NCCL of this process, opened at run time.
//
// Contract:
// - gpuLibrary() resolves both once per process (thread-safe) and never closes them: one NCCL
//   per process, shared with the framework that may have loaded it already. Resolution order for
//   each: the path in HORA_NCCL_LIBRARY / HORA_CUDA_LIBRARY; a copy already in the process
//   (dlopen RTLD_NOLOAD of libnccl.so.2, libcudart.so.13/.12/.11.0/.so); the same names through
//   the dynamic loader's search path.
// - available() is true only when both resolved, every needed symbol is present, NCCL reports a
//   version >= 2.7 (grouped send/recv) and the runtime sees at least one device. Otherwise
//   reason() says which step failed (no library, no driver, no device), and the GPU path is off:
//   GPU tensors are refused with that reason.
// - ncclVersion() is NCCL's code (2.10.3 = 21003); features are gated on it (bf16: >= 2.10;
//   non-blocking communicator init: >= 2.14 and ncclCommInitRankConfig present, which is
//   resolved as optional so that older libraries keep the blocking ncclCommInitRank).
#include <string>

#include "core/transport/nccl/gpu_api.h"

namespace hora::gpu {

class GpuLibrary {
 public:
  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }
  bool ncclLoaded() const { return ncclLoaded_; }  // libnccl resolved, whatever the device state
  int ncclVersion() const { return ncclVersion_; }
  int deviceCount() const { return deviceCount_; }
  const std::string& ncclPath() const { return ncclPath_; }
  const std::string& cudaPath() const { return cudaPath_; }
  bool supportsBfloat16() const { return ncclVersion_ >= 21000; }
  // ncclCommInitRankConfig with blocking = 0, polled through ncclCommGetAsyncError (>= 2.14).
  bool supportsNonblockingInit() const {
    return ncclVersion_ >= kNcclNonblockingInitVersion && nccl_.commInitRankConfig != nullptr;
  }

  const CudaApi& cuda() const { return cuda_; }
  const NcclApi& nccl() const { return nccl_; }

  static GpuLibrary load();

 private:
  bool available_ = false;
  bool ncclLoaded_ = false;
  std::string reason_;
  int ncclVersion_ = 0;
  int deviceCount_ = 0;
  std::string ncclPath_, cudaPath_;
  CudaApi cuda_{};
  NcclApi nccl_{};
};

// The process-wide library, loaded on first use.
const GpuLibrary& gpuLibrary();

// "NCCL 2.23.3" from a version code.
std::string ncclVersionString(int code);

// Throws IoError naming `what` when a CUDA or NCCL call failed.
void checkCuda(cudaError_t e, const char* what);
void checkNccl(ncclResult_t r, const char* what);

}  // namespace hora::gpu
