#pragma once
// The C ABI of the CUDA runtime and NCCL calls Hora makes, declared here so that nothing CUDA is
// needed to build Hora: the libraries are opened at run time (gpu_library.h) and these tables
// hold the resolved functions. Enum values and struct layouts are NCCL's and cudart's own (stable
// across releases: nccl.h 2.10-2.32, cuda_runtime_api.h 11-13).
#include <climits>
#include <cstddef>

namespace hora::gpu {

using cudaError_t = int;
using cudaStream_t = void*;
using cudaEvent_t = void*;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorNotReady = 600;
constexpr unsigned kStreamNonBlocking = 0x01;   // cudaStreamNonBlocking
constexpr unsigned kEventDisableTiming = 0x02;  // cudaEventDisableTiming
constexpr int kMemcpyDefault = 4;               // cudaMemcpyDefault (unified addressing)

using ncclResult_t = int;
using ncclComm_t = void*;
struct ncclUniqueId {
  char internal[128];
};
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclResult_t ncclInProgress = 7;

// ncclConfig_t as NCCL 2.14 laid it out (ncclConfig_v21400), filled as NCCL_CONFIG_INITIALIZER
// fills it: size, magic and version first, every setting NCCL_CONFIG_UNDEF_INT. Later releases
// append fields and read an older struct by its size and version, taking their defaults for the
// rest. Passed to ncclCommInitRankConfig (NCCL >= 2.14).
struct ncclConfig_t {
  size_t size = sizeof(ncclConfig_t);
  unsigned int magic = 0xcafebeef;  // NCCL_API_MAGIC
  unsigned int version = 21400;     // NCCL_VERSION(2, 14, 0): the layout above
  int blocking = INT_MIN;           // NCCL_CONFIG_UNDEF_INT; 0 = non-blocking
};
constexpr int kNcclNonblockingInitVersion = 21400;

enum NcclType : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,  // NCCL >= 2.10
};
enum NcclRedOp : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

struct CudaApi {
  cudaError_t (*getDeviceCount)(int*);
  cudaError_t (*setDevice)(int);
  cudaError_t (*getDevice)(int*);
  const char* (*getErrorString)(cudaError_t);
  cudaError_t (*malloc)(void**, size_t);
  cudaError_t (*free)(void*);
  cudaError_t (*memcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
  cudaError_t (*memsetAsync)(void*, int, size_t, cudaStream_t);
  cudaError_t (*streamCreateWithFlags)(cudaStream_t*, unsigned);
  cudaError_t (*streamDestroy)(cudaStream_t);
  cudaError_t (*streamSynchronize)(cudaStream_t);
  cudaError_t (*eventCreateWithFlags)(cudaEvent_t*, unsigned);
  cudaError_t (*eventDestroy)(cudaEvent_t);
  cudaError_t (*eventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*eventQuery)(cudaEvent_t);
  cudaError_t (*eventSynchronize)(cudaEvent_t);
  cudaError_t (*streamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
};

struct NcclApi {
  ncclResult_t (*getVersion)(int*);
  const char* (*getErrorString)(ncclResult_t);
  ncclResult_t (*getUniqueId)(ncclUniqueId*);
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  // Optional (NCCL >= 2.14): null when the library lacks it.
  ncclResult_t (*commInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  ncclResult_t (*allReduce)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce)(const void*, void*, size_t, int, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
};

}  // namespace hora::gpu
