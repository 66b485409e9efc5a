#include "core/transport/nccl/communicator.h"

#include <algorithm>
#include <thread>

#include "core/common/errors.h"

namespace hora::gpu {
namespace {

bool allEqual(const std::vector<size_t>& v) {
  for (size_t x : v) {
    if (x != v.front()) return false;
  }
  return true;
}

// "20 s", or "1500 ms" for a bound that is not whole seconds.
std::string durationText(Millis d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

int ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Product: return ncclProd;
    case ReduceOp::Average: return ncclAvg;
    default: throw NotSupported(std::string("NCCL has no reduction ") + reduceOpName(op));
  }
}

}  // namespace

bool ncclTypeOf(DataType dtype, const GpuLibrary& lib, int* out) {
  switch (dtype) {
    case DataType::Int8: *out = ncclInt8; return true;
    case DataType::UInt8: *out = ncclUint8; return true;
    case DataType::Int32: *out = ncclInt32; return true;
    case DataType::Int64: *out = ncclInt64; return true;
    case DataType::Float16: *out = ncclFloat16; return true;
    case DataType::Float32: *out = ncclFloat32; return true;
    case DataType::Float64: *out = ncclFloat64; return true;
    case DataType::BFloat16: *out = ncclBfloat16; return lib.supportsBfloat16();
    default: return false;
  }
}

Capabilities NcclCommunicator::gpuCapabilities(const GpuLibrary& lib) {
  Capabilities c;
  c.hostMemory = false;
  c.cudaMemory = lib.available();
  c.subsets = false;
  for (CollectiveOp op :
       {CollectiveOp::Allreduce, CollectiveOp::Allgatherv, CollectiveOp::Broadcast,
        CollectiveOp::Alltoallv, CollectiveOp::ReduceScatter, CollectiveOp::SendRecv}) {
    c.ops.set(static_cast<size_t>(op));
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    c.reduceOps.set(static_cast<size_t>(op));
  }
  c.reducibleDtypes.reset();
  for (int t = 0; t < kNumDataTypes; ++t) {
    int nt;
    if (ncclTypeOf(static_cast<DataType>(t), lib, &nt)) {
      c.dtypes.set(static_cast<size_t>(t));
      c.reducibleDtypes.set(static_cast<size_t>(t));
    }
  }
  // The limits the enqueue checks apply to GPU requests (capabilities.h).
  if (!lib.available())
    c.offReason = lib.reason().empty() ? "GPU libraries not loaded" : lib.reason();
  c.deviceCount = lib.deviceCount();
  c.deviceRuntime = "CUDA";
  c.adasum = false;
  // Scaling would need a kernel of its own; the hierarchical allreduce scales on the host.
  c.scaleFactors = false;
  c.scaleFactorsHierarchical = true;
  c.reducer = "NCCL (" + ncclVersionString(lib.ncclVersion()) + ")";
  c.reducibleHint = "float32, float16, int32, ...; bfloat16 needs NCCL 2.10 or later";
  return c;
}

NcclCommunicator::NcclCommunicator(const GpuLibrary& lib, const ncclUniqueId& id, int rank,
                                   int size, int device, cudaStream_t stream, Millis initTimeout,
                                   const std::string& who, const std::function<void()>& started)
    : lib_(&lib), bound_(initTimeout), rank_(rank), size_(size), device_(device), stream_(stream) {
  checkCuda(lib.cuda().setDevice(device), "cudaSetDevice");
  if (!lib.supportsNonblockingInit()) {
    if (started) started();
    checkNccl(lib.nccl().commInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    return;
  }
  ncclConfig_t config;
  config.blocking = 0;
  ncclResult_t r = lib.nccl().commInitRankConfig(&comm_, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort();
    checkNccl(r, "ncclCommInitRankConfig");
  }
  nonblocking_ = true;
  if (started) {
    try {
      started();
    } catch (...) {
      abort();
      throw;
    }
  }
  r = settle();
  if (r == ncclInProgress) {
    abort();
    throw TimeoutError(who + " not complete after " + durationText(bound_) +
                       ": a member did not join (dead, hung, or on another path); every "
                       "member must reach the collective; the communicator was aborted");
  }
  if (r != ncclSuccess) {
    abort();
    checkNccl(r, "ncclCommInitRankConfig (completing)");
  }
}

ncclResult_t NcclCommunicator::settle() const {
  const auto deadline = Clock::now() + bound_;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    ncclResult_t e = ncclSuccess;
    ncclResult_t q = lib_->nccl().commGetAsyncError(comm_, &e);
    if (q != ncclSuccess) return q;
    if (e != ncclInProgress || Clock::now() >= deadline) return e;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

void NcclCommunicator::enqueued(ncclResult_t r, const char* what) {
  if (r == ncclInProgress && nonblocking_) {
    r = settle();
    if (r == ncclInProgress) {
      throw TimeoutError(std::string(what) + " still in progress after " + durationText(bound_) +
                         ": a member did not join");
    }
  }
  checkNccl(r, what);
}

NcclCommunicator::~NcclCommunicator() { abort(); }

ncclComm_t NcclCommunicator::live() const {
  if (comm_ == nullptr) throw IoError("the NCCL communicator was aborted after an earlier error");
  return comm_;
}

void NcclCommunicator::abort() {
  if (comm_ == nullptr) return;
  lib_->nccl().commAbort(comm_);
  comm_ = nullptr;
}

ncclResult_t NcclCommunicator::asyncError() const {
  if (comm_ == nullptr) return ncclSuccess;
  ncclResult_t r = ncclSuccess;
  ncclResult_t q = lib_->nccl().commGetAsyncError(comm_, &r);
  return q != ncclSuccess ? q : r;
}

void NcclCommunicator::groupStart() { enqueued(lib_->nccl().groupStart(), "ncclGroupStart"); }
void NcclCommunicator::groupEnd() { enqueued(lib_->nccl().groupEnd(), "ncclGroupEnd"); }

void NcclCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  int t;
  if (!ncclTypeOf(dtype, *lib_, &t)) {
    throw NotSupported(std::string("backend nccl does not reduce ") + dtypeName(dtype));
  }
  enqueued(lib_->nccl().allReduce(buf, buf, count, t, ncclOp(op), live(), stream_),
           "ncclAllReduce");
}

// Equal blocks: one ncclAllGather. Unequal: one broadcast per rank, in one group.
void NcclCommunicator::allgatherv(const void* in, void* out,
                                  const std::vector<size_t>& bytesPerRank) {
  auto* o = static_cast<uint8_t*>(out);
  if (allEqual(bytesPerRank)) {
    enqueued(lib_->nccl().allGather(in, o, bytesPerRank.front(), ncclUint8, live(), stream_),
             "ncclAllGather");
    return;
  }
  groupStart();
  size_t off = 0;
  for (int k = 0; k < size_; ++k) {
    const void* src = k == rank_ ? in : o + off;
    enqueued(lib_->nccl().broadcast(src, o + off, bytesPerRank[k], ncclUint8, k, live(), stream_),
             "ncclBroadcast");
    off += bytesPerRank[k];
  }
  groupEnd();
}

void NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
  enqueued(lib_->nccl().broadcast(buf, buf, bytes, ncclUint8, root, live(), stream_),
           "ncclBroadcast");
}

// Grouped send/recv with every peer (NCCL's alltoall pattern; empty blocks included, so that
// every rank posts the same group).
void NcclCommunicator::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                                 const std::vector<size_t>& recvBytes) {
  groupStart();
  size_t sOff = 0, rOff = 0;
  for (int k = 0; k < size_; ++k) {
    enqueued(lib_->nccl().send(static_cast<const uint8_t*>(in) + sOff, sendBytes[k], ncclUint8, k,
                               live(), stream_),
             "ncclSend");
    enqueued(lib_->nccl().recv(static_cast<uint8_t*>(out) + rOff, recvBytes[k], ncclUint8, k,
                               live(), stream_),
             "ncclRecv");
    sOff += sendBytes[k];
    rOff += recvBytes[k];
  }
  groupEnd();
}

// Equal blocks: one ncclReduceScatter. Unequal: one ncclReduce per block to its rank, in a group.
void NcclCommunicator::reduceScatter(const void* in, void* out,
                                     const std::vector<size_t>& countsPerRank, DataType dtype,
                                     ReduceOp op) {
  int t;
  if (!ncclTypeOf(dtype, *lib_, &t)) {
    throw NotSupported(std::string("backend nccl does not reduce ") + dtypeName(dtype));
  }
  if (allEqual(countsPerRank)) {
    enqueued(
        lib_->nccl().reduceScatter(in, out, countsPerRank.front(), t, ncclOp(op), live(), stream_),
        "ncclReduceScatter");
    return;
  }
  const size_t elem = dtypeSize(dtype);
  groupStart();
  size_t off = 0;
  for (int k = 0; k < size_; ++k) {
    enqueued(lib_->nccl().reduce(static_cast<const uint8_t*>(in) + off * elem, out,
                                 countsPerRank[k], t, ncclOp(op), k, live(), stream_),
             "ncclReduce");
    off += countsPerRank[k];
  }
  groupEnd();
}

void NcclCommunicator::sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom,
                                void* recvBuf, size_t recvBytes) {
  groupStart();
  if (sendBytes > 0) {
    enqueued(lib_->nccl().send(sendBuf, sendBytes, ncclUint8, sendTo, live(), stream_), "ncclSend");
  }
  if (recvBytes > 0) {
    enqueued(lib_->nccl().recv(recvBuf, recvBytes, ncclUint8, recvFrom, live(), stream_),
             "ncclRecv");
  }
  groupEnd();
}

std::unique_ptr<Communicator> NcclCommunicator::subset(const std::vector<int>&) {
  notSupported("subset (a process set gets its own NCCL communicator)");
}

}  // namespace hora::gpu
