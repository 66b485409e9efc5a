// The op families on device memory, enqueued on the engine's stream of the device. Reductions
// run in NCCL (Average as ncclAvg); scale factors other than 1 are refused at enqueue
// (the device limits in the GPU backend's capabilities, core/coordinator/enqueue_checks.cc), so
// nothing here needs a kernel of its own.
#include <algorithm>

#include "core/common/errors.h"
#include "core/ops/gpu_executor.h"
#include "core/ops/ops.h"

namespace hora {
namespace {

ReduceOp deviceOp(const Response& r) { return r.reduceOp; }  // Average stays: ncclAvg

// One tensor of our own runs in place; fused tensors (and zeros for a joined rank) go through
// the device fusion buffer as one ncclAllReduce.
void allreduce(const Response& r, GpuOpContext& cx) {
  const size_t elem = dtypeSize(r.dtype);
  size_t total = 0;
  for (int64_t n : r.elementCounts) total += static_cast<size_t>(n);
  if (r.tensorCount() == 1 && cx.entries[0] != nullptr) {
    cx.comm.allreduce(cx.entries[0]->tensor.data, total, r.dtype, deviceOp(r));
    return;
  }
  uint8_t* buf = cx.fusion.reserve(cx.lib, total * elem);
  packTensors(r, cx, buf);
  cx.comm.allreduce(buf, total, r.dtype, deviceOp(r));
  unpackTensors(r, cx, buf);
}

TensorEntry& entry(GpuOpContext& cx, size_t t) {
  HORA_CHECK(cx.entries[t] != nullptr, "GPU operation without a local tensor");
  return *cx.entries[t];
}

// Fused tensors are one NCCL group: one launch, no packing.
void broadcast(const Response& r, GpuOpContext& cx) {
  auto it = std::lower_bound(cx.setRanks.begin(), cx.setRanks.end(), r.rootRank);
  HORA_CHECK(it != cx.setRanks.end() && *it == r.rootRank, "broadcast root outside the set");
  int root = static_cast<int>(it - cx.setRanks.begin());
  cx.comm.groupStart();
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    TensorEntry& e = entry(cx, t);
    cx.comm.broadcast(e.tensor.data, e.tensor.bytes(), root);
  }
  cx.comm.groupEnd();
}

void allgather(const Response& r, GpuOpContext& cx) {
  const int n = cx.comm.size();
  const size_t elem = dtypeSize(r.dtype);
  cx.comm.groupStart();
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    TensorEntry& e = entry(cx, t);
    std::vector<size_t> bytes(n);
    int64_t rows = 0;
    for (int k = 0; k < n; ++k) {
      int64_t got = r.gatheredRows[t * n + k];
      bytes[k] = static_cast<size_t>(got * r.rowElements[t]) * elem;
      rows += got;
    }
    std::vector<int64_t> shape = e.tensor.shape;
    shape[0] = rows;
    OutputTensor out = gpu::allocateDeviceOutput(cx.lib, cx.device, r.dtype, shape);
    cx.comm.allgatherv(e.tensor.data, out.data(), bytes);
    e.handle->output = std::move(out);
  }
  cx.comm.groupEnd();
}

// Grouped send/recv (the communicator's alltoallv) of the agreed splits.
void alltoall(const Response& r, GpuOpContext& cx) {
  TensorEntry& e = entry(cx, 0);
  AlltoallPlan plan = planAlltoall(r, cx.comm.size(), cx.comm.rank());
  std::vector<int64_t> shape = e.tensor.shape;
  shape[0] = plan.rows;
  OutputTensor out = gpu::allocateDeviceOutput(cx.lib, cx.device, r.dtype, shape);
  cx.comm.alltoallv(e.tensor.data, plan.sendBytes, out.data(), plan.recvBytes);
  e.handle->output = std::move(out);
  e.handle->receivedSplits = std::move(plan.received);
}

// A tensor's blocks already lie in rank order: each reduces in place of its input, one NCCL
// group for fused tensors.
void reducescatter(const Response& r, GpuOpContext& cx) {
  const int n = cx.comm.size(), me = cx.comm.rank();
  cx.comm.groupStart();
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    TensorEntry& e = entry(cx, t);
    int64_t dim0 = r.rowElements[t] > 0 ? r.elementCounts[t] / r.rowElements[t] : e.tensor.shape[0];
    std::vector<size_t> counts(n);
    for (int k = 0; k < n; ++k) counts[k] = reducescatterRows(dim0, n, k) * r.rowElements[t];
    std::vector<int64_t> shape = e.tensor.shape;
    shape[0] = static_cast<int64_t>(reducescatterRows(dim0, n, me));
    OutputTensor out = gpu::allocateDeviceOutput(cx.lib, cx.device, r.dtype, shape);
    cx.comm.reduceScatter(e.tensor.data, out.data(), counts, r.dtype, deviceOp(r));
    e.handle->output = std::move(out);
  }
  cx.comm.groupEnd();
}

}  // namespace

void copyOnStream(GpuOpContext& cx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  gpu::checkCuda(cx.lib.cuda().memcpyAsync(dst, src, bytes, gpu::kMemcpyDefault, cx.comm.stream()),
                 "cudaMemcpyAsync");
}

void zeroOnStream(GpuOpContext& cx, void* dst, size_t bytes) {
  if (bytes == 0) return;
  gpu::checkCuda(cx.lib.cuda().memsetAsync(dst, 0, bytes, cx.comm.stream()), "cudaMemsetAsync");
}

size_t packTensors(const Response& r, GpuOpContext& cx, uint8_t* buf) {
  const size_t elem = dtypeSize(r.dtype);
  size_t off = 0;
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    size_t bytes = static_cast<size_t>(r.elementCounts[t]) * elem;
    if (cx.entries[t] != nullptr) {
      copyOnStream(cx, buf + off, cx.entries[t]->tensor.data, bytes);
    } else {
      zeroOnStream(cx, buf + off, bytes);  // a joined rank adds nothing
    }
    off += bytes;
  }
  return off;
}

void unpackTensors(const Response& r, GpuOpContext& cx, const uint8_t* buf) {
  const size_t elem = dtypeSize(r.dtype);
  size_t off = 0;
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    size_t bytes = static_cast<size_t>(r.elementCounts[t]) * elem;
    if (cx.entries[t] != nullptr) copyOnStream(cx, cx.entries[t]->tensor.data, buf + off, bytes);
    off += bytes;
  }
}

void runGpuResponse(const Response& r, GpuOpContext& cx) {
  switch (r.kind) {
    case OpKind::Allreduce: allreduce(r, cx); return;
    case OpKind::Broadcast: broadcast(r, cx); return;
    case OpKind::Allgather: allgather(r, cx); return;
    case OpKind::Alltoall: alltoall(r, cx); return;
    case OpKind::Reducescatter: reducescatter(r, cx); return;
    case OpKind::Adasum:
      throw NotSupported("Adasum is not supported for GPU tensors; reduce them on the CPU");
    default:
      throwInternal(__FILE__, __LINE__, std::string("no GPU path for ") + opKindName(r.kind));
  }
}

}  // namespace hora
