#include "core/transport/nccl/gpu_library.h"

#include <dlfcn.h>

#include <initializer_list>
#include <vector>

#include "core/common/errors.h"
#include "core/common/settings.h"

namespace hora::gpu {
namespace {

constexpr int kMinNcclVersion = 20700;  // grouped ncclSend/ncclRecv (alltoall)

struct Opened {
  void* handle = nullptr;
  std::string path;
  std::string error;
};

// The override first; else a copy already in the process (never a second NCCL); else the names
// through the loader's search path. RTLD_LOCAL: the symbols are reached through dlsym only.
Opened openLibrary(const char* overrideVar, std::initializer_list<const char*> names) {
  Opened o;
  std::string path;
  if (lookupEnv(overrideVar, &path) && !path.empty()) {
    o.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    o.path = path;
    if (o.handle == nullptr) o.error = dlerror();
    return o;
  }
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      o.handle = h;
      o.path = std::string(name) + " (already loaded)";
      return o;
    }
  }
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      o.handle = h;
      o.path = name;
      return o;
    }
    const char* e = dlerror();
    if (o.error.empty() && e != nullptr) o.error = e;
  }
  return o;
}

template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn* out, std::vector<std::string>* missing) {
  *out = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (*out == nullptr) missing->push_back(symbol);
  return *out != nullptr;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void resolveNccl(void* h, NcclApi* n, std::vector<std::string>* missing) {
  resolve(h, "ncclGetVersion", &n->getVersion, missing);
  resolve(h, "ncclGetErrorString", &n->getErrorString, missing);
  resolve(h, "ncclGetUniqueId", &n->getUniqueId, missing);
  resolve(h, "ncclCommInitRank", &n->commInitRank, missing);
  resolve(h, "ncclCommAbort", &n->commAbort, missing);
  resolve(h, "ncclCommDestroy", &n->commDestroy, missing);
  resolve(h, "ncclCommGetAsyncError", &n->commGetAsyncError, missing);
  resolve(h, "ncclGroupStart", &n->groupStart, missing);
  resolve(h, "ncclGroupEnd", &n->groupEnd, missing);
  resolve(h, "ncclAllReduce", &n->allReduce, missing);
  resolve(h, "ncclBroadcast", &n->broadcast, missing);
  resolve(h, "ncclReduce", &n->reduce, missing);
  resolve(h, "ncclAllGather", &n->allGather, missing);
  resolve(h, "ncclReduceScatter", &n->reduceScatter, missing);
  resolve(h, "ncclSend", &n->send, missing);
  resolve(h, "ncclRecv", &n->recv, missing);
  // Optional: absent before NCCL 2.14, where communicator init only blocks.
  n->commInitRankConfig =
      reinterpret_cast<decltype(n->commInitRankConfig)>(dlsym(h, "ncclCommInitRankConfig"));
}

void resolveCuda(void* h, CudaApi* c, std::vector<std::string>* missing) {
  resolve(h, "cudaGetDeviceCount", &c->getDeviceCount, missing);
  resolve(h, "cudaSetDevice", &c->setDevice, missing);
  resolve(h, "cudaGetDevice", &c->getDevice, missing);
  resolve(h, "cudaGetErrorString", &c->getErrorString, missing);
  resolve(h, "cudaMalloc", &c->malloc, missing);
  resolve(h, "cudaFree", &c->free, missing);
  resolve(h, "cudaMemcpyAsync", &c->memcpyAsync, missing);
  resolve(h, "cudaMemsetAsync", &c->memsetAsync, missing);
  resolve(h, "cudaStreamCreateWithFlags", &c->streamCreateWithFlags, missing);
  resolve(h, "cudaStreamDestroy", &c->streamDestroy, missing);
  resolve(h, "cudaStreamSynchronize", &c->streamSynchronize, missing);
  resolve(h, "cudaEventCreateWithFlags", &c->eventCreateWithFlags, missing);
  resolve(h, "cudaEventDestroy", &c->eventDestroy, missing);
  resolve(h, "cudaEventRecord", &c->eventRecord, missing);
  resolve(h, "cudaEventQuery", &c->eventQuery, missing);
  resolve(h, "cudaEventSynchronize", &c->eventSynchronize, missing);
  resolve(h, "cudaStreamWaitEvent", &c->streamWaitEvent, missing);
}

}  // namespace

std::string ncclVersionString(int code) {
  // Codes from 2.9 on are major*10000 + minor*100 + patch; older ones major*1000 + minor*100.
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return "NCCL " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(code % 100);
}

GpuLibrary GpuLibrary::load() {
  GpuLibrary lib;
  Opened nccl = openLibrary("NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so"});
  if (nccl.handle == nullptr) {
    lib.reason_ = "NCCL is not available (libnccl.so.2 not found: " + nccl.error +
                  "; install a CUDA build of the framework or nvidia-nccl-cu12, or set "
                  "HORA_NCCL_LIBRARY)";
    return lib;
  }
  lib.ncclPath_ = nccl.path;
  std::vector<std::string> missing;
  resolveNccl(nccl.handle, &lib.nccl_, &missing);
  if (!missing.empty()) {
    lib.reason_ = nccl.path + " lacks " + joined(missing);
    return lib;
  }
  lib.ncclLoaded_ = true;
  if (lib.nccl_.getVersion(&lib.ncclVersion_) != ncclSuccess) lib.ncclVersion_ = 0;
  if (lib.ncclVersion_ < kMinNcclVersion) {
    lib.reason_ = ncclVersionString(lib.ncclVersion_) + " is older than 2.7, which Hora needs";
    return lib;
  }
  Opened cuda = openLibrary(
      "CUDA_LIBRARY", {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"});
  if (cuda.handle == nullptr) {
    lib.reason_ = "the CUDA runtime is not available (libcudart not found: " + cuda.error +
                  "; set HORA_CUDA_LIBRARY)";
    return lib;
  }
  lib.cudaPath_ = cuda.path;
  resolveCuda(cuda.handle, &lib.cuda_, &missing);
  if (!missing.empty()) {
    lib.reason_ = cuda.path + " lacks " + joined(missing);
    return lib;
  }
  cudaError_t e = lib.cuda_.getDeviceCount(&lib.deviceCount_);
  if (e != cudaSuccess || lib.deviceCount_ <= 0) {
    lib.deviceCount_ = 0;
    lib.reason_ = std::string("no usable CUDA device: cudaGetDeviceCount says '") +
                  lib.cuda_.getErrorString(e) + "' (error " + std::to_string(e) + ")";
    return lib;
  }
  lib.available_ = true;
  return lib;
}

const GpuLibrary& gpuLibrary() {
  // Process-wide by nature: a loaded library cannot be unloaded safely (CUDA and NCCL keep
  // threads and state), so it is resolved once and lives as long as the process.
  static const GpuLibrary lib = GpuLibrary::load();
  return lib;
}

void checkCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw IoError(std::string(what) + " failed: " + gpuLibrary().cuda().getErrorString(e) +
                " (CUDA error " + std::to_string(e) + ")");
}

void checkNccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  throw IoError(std::string(what) + " failed: " + gpuLibrary().nccl().getErrorString(r) +
                " (NCCL error " + std::to_string(r) + ")");
}

}  // namespace hora::gpu
