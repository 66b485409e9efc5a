// The hierarchical allreduce of GPU tensors (as HOROVOD_HIERARCHICAL_ALLREDUCE runs it): a
// reduce-scatter over NCCL among the ranks of this host, an allreduce of each rank's slice across
// hosts over the CPU transport (TCP or MPI, the cross communicator of the hierarchical path),
// staged through host memory, and an allgather over NCCL among the host's ranks.
//
// The tensors are packed into the device fusion buffer, padded with zeros to a multiple of the
// host's rank count so that every local rank owns an equal slice (the padding's results are
// dropped; results are exact, with no remainder step). Hora has no device kernel to scale with,
// so scaling runs on the host too: a prescale factor scales every input (as Horovod's kernel
// does) in a round trip of the packed buffer through host memory before the reduce-scatter, and
// Average's division and the postscale factor apply to the slice after the cross-host allreduce.
#include <cctype>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/ops/gpu_executor.h"

namespace hora {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The slice's scaling after the cross-host sum: Average divides by the set's size (exactly, as
// the CPU path does, when there is no postscale factor), then the postscale factor.
void postscale(const Response& r, void* slice, size_t count, int setSize) {
  const bool average = r.reduceOp == ReduceOp::Average;
  if (average && r.postscale == 1.0) {
    divideInPlace(slice, count, r.dtype, setSize);
    return;
  }
  const double factor = average ? r.postscale / setSize : r.postscale;
  if (factor != 1.0) scaleInPlace(slice, count, r.dtype, factor);
}

}  // namespace

void runGpuHierarchicalAllreduce(const Response& r, GpuOpContext& cx, GpuHierarchy& h) {
  const size_t elem = dtypeSize(r.dtype);
  size_t total = 0;
  for (int64_t n : r.elementCounts) total += static_cast<size_t>(n);
  if (total == 0) return;  // the same on every rank: nobody calls a collective
  const size_t localSize = static_cast<size_t>(cx.comm.size());
  const size_t perRank = (total + localSize - 1) / localSize;
  const size_t sliceBytes = perRank * elem;
  const ReduceOp op = r.reduceOp == ReduceOp::Average ? ReduceOp::Sum : r.reduceOp;

  h.step("MEMCPY_IN_FUSION_BUFFER");
  uint8_t* buf = cx.fusion.reserve(cx.lib, sliceBytes * localSize);
  const size_t off = packTensors(r, cx, buf);
  zeroOnStream(cx, buf + off, sliceBytes * localSize - off);
  uint8_t* slice = buf + sliceBytes * static_cast<size_t>(cx.comm.rank());
  // Host memory: the slice, then (for a prescale factor) the packed inputs.
  uint8_t* host = h.staging.reserve(sliceBytes + (r.prescale != 1.0 ? off : 0));

  if (r.prescale != 1.0) {
    h.step("PRESCALE_IN_HOST_BUFFER");
    uint8_t* inputs = host + sliceBytes;
    h.waitForDevice("the packing of the inputs");  // see below: the stream first
    copyOnStream(cx, inputs, buf, off);
    h.waitForDevice("the copy of the inputs to the host");
    scaleInPlace(inputs, total, r.dtype, r.prescale);
    copyOnStream(cx, buf, inputs, off);
  }

  h.step("NCCL_REDUCESCATTER");
  cx.comm.reduceScatter(buf, slice, std::vector<size_t>(localSize, perRank), r.dtype, op);

  h.step("MEMCPY_IN_HOST_BUFFER");
  // The cross-host step runs on this thread over the CPU transport, so it must see the slice the
  // device reduced: wait for the stream to get there. This is a host sync on the hot path, which
  // Horovod's hierarchical allreduce does as well; the wait is bounded by HORA_TIMEOUT_SECONDS.
  // It comes before the copy because a copy to pageable host memory may itself block the thread
  // until the stream reaches it (unbounded, were a peer dead); the copy then runs on an idle
  // stream, and a second bounded wait sees it done.
  h.waitForDevice("the reduce-scatter within the host");
  copyOnStream(cx, host, slice, sliceBytes);
  h.waitForDevice("the copy of the slice to the host");

  h.step(upper(h.cross.backendName()) + "_ALLREDUCE");
  h.cross.allreduce(host, perRank, r.dtype, op);
  postscale(r, host, perRank, h.setSize);

  // A pageable source: the copy reads it before returning or (queued) before the stream moves
  // on; the staging buffer is not written again before the next wait for the device.
  h.step("MEMCPY_OUT_HOST_BUFFER");
  copyOnStream(cx, slice, host, sliceBytes);

  h.step("NCCL_ALLGATHER");
  cx.comm.allgatherv(slice, buf, std::vector<size_t>(localSize, sliceBytes));

  h.step("MEMCPY_OUT_FUSION_BUFFER");
  unpackTensors(r, cx, buf);
}

}  // namespace hora
