#pragma once
// NcclCommunicator: the ranks of one process set on their GPUs, through NCCL.
//
// Contract (where it differs from core/transport/communicator.h):
// - Buffers are device memory of this communicator's device. Calls are stream-ordered: they
//   enqueue work on stream() and return once it is enqueued, not when it is done. The caller
//   orders inputs before (cudaStreamWaitEvent on stream()) and learns of completion through an
//   event recorded on stream() afterwards; buffers must stay alive until then.
// - Calls made between groupStart() and groupEnd() form one NCCL group (fused responses).
// - Creation is collective. With NCCL >= 2.14 it is non-blocking (config.blocking = 0) and polled
//   through ncclCommGetAsyncError, sleeping between polls, for at most `initTimeout`: past it
//   the half-made communicator is aborted and TimeoutError names `who` and says a member did not
//   join. Older NCCL has only the blocking ncclCommInitRank, which waits without a bound.
//   A non-blocking communicator may answer any later call with ncclInProgress; the call then
//   waits the same way (same bound) before the next one is made, as NCCL requires.
// - Errors at enqueue throw IoError. Errors while the work runs are asynchronous: asyncError()
//   polls them. abort() ends every pending operation (ncclCommAbort) and makes the communicator
//   unusable; the destructor aborts too, since ncclCommDestroy may wait forever for a dead peer.
// - Reductions take Sum, Min, Max, Product and Average (ncclAvg). dtypes NCCL has no type for
//   (int16, uint16, bool) move as bytes; reducing them is NotSupported, as is barrier() (the
//   control plane runs barriers) and subset() (one communicator per process set is made from a
//   unique id through the store instead).
// - One thread at a time (the runtime's background thread).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/transport/communicator.h"
#include "core/transport/nccl/gpu_library.h"

namespace hora::gpu {

class NcclCommunicator final : public Communicator {
 public:
  // Joins the communicator named by `id` (collective over its ranks; see the contract above).
  // `who`: "rank 1: NCCL communicator for process set 0 on GPU 1 (ranks 0, 1, 2)". `started`,
  // when given, runs once this rank's init call is under way (non-blocking: it returned; blocking:
  // just before it), so that peers can tell a member that never began from one that hangs.
  NcclCommunicator(const GpuLibrary& lib, const ncclUniqueId& id, int rank, int size, int device,
                   cudaStream_t stream, Millis initTimeout = Millis(30000),
                   const std::string& who = "NCCL communicator",
                   const std::function<void()>& started = nullptr);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "nccl"; }
  Capabilities capabilities() const override { return gpuCapabilities(*lib_); }
  static Capabilities gpuCapabilities(const GpuLibrary& lib);

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override;
  void reduceScatter(const void* in, void* out, const std::vector<size_t>& countsPerRank,
                     DataType dtype, ReduceOp op) override;
  void sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom, void* recvBuf,
                size_t recvBytes) override;
  std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) override;

  void groupStart();
  void groupEnd();
  // ncclSuccess, or the error NCCL reported while running work.
  ncclResult_t asyncError() const;
  void abort();
  bool aborted() const { return comm_ == nullptr; }
  bool nonblocking() const { return nonblocking_; }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  ncclComm_t live() const;
  // checkNccl() that, on a non-blocking communicator, first waits out ncclInProgress.
  void enqueued(ncclResult_t r, const char* what);
  // Polls ncclCommGetAsyncError while it says ncclInProgress, sleeping in growing steps;
  // returns its final answer, or ncclInProgress when `bound_` passed first.
  ncclResult_t settle() const;

  const GpuLibrary* lib_;
  ncclComm_t comm_ = nullptr;
  bool nonblocking_ = false;
  Millis bound_;
  int rank_, size_, device_;
  cudaStream_t stream_;
};

// NCCL's type for a dtype; false for those it lacks (int16, uint16, bool) and for bfloat16
// before NCCL 2.10.
bool ncclTypeOf(DataType dtype, const GpuLibrary& lib, int* out);

}  // namespace hora::gpu
