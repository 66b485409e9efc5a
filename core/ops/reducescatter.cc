#include <cstring>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/ops/ops.h"

namespace hora {

size_t reducescatterRows(int64_t dim0, int n, int k) {
  int64_t base = dim0 / n, extra = dim0 % n;
  return static_cast<size_t>(base + (k < extra ? 1 : 0));
}

namespace {

// Each tensor's first dimension (its rows), from the response or this rank's tensor.
std::vector<int64_t> firstDims(const Response& r, const OpContext& cx) {
  std::vector<int64_t> dim0(r.tensorCount());
  for (size_t t = 0; t < dim0.size(); ++t) {
    HORA_CHECK(cx.entries[t] != nullptr, "reducescatter without a local tensor");
    dim0[t] = r.rowElements[t] > 0 ? r.elementCounts[t] / r.rowElements[t]
                                   : cx.entries[t]->tensor.shape[0];
  }
  return dim0;
}

// Packed layout: one block per rank in rank order; rank k's block is tensor 0's rows for k, then
// tensor 1's rows for k, and so on. The reduction is applied to a packed copy, so the caller's
// input is never modified.
uint8_t* packBlocks(const Response& r, OpContext& cx, const std::vector<int64_t>& dim0,
                    size_t total) {
  ActivityScope a(cx, r, "MEMCPY_IN_FUSION_BUFFER");
  const int n = cx.comm.size();
  const size_t elem = dtypeSize(r.dtype);
  uint8_t* buf = cx.fusion.reserve(total * elem);
  size_t off = 0;
  for (int k = 0; k < n; ++k) {
    for (size_t t = 0; t < dim0.size(); ++t) {
      size_t rowBytes = static_cast<size_t>(r.rowElements[t]) * elem;
      size_t firstRow = 0;
      for (int q = 0; q < k; ++q) firstRow += reducescatterRows(dim0[t], n, q);
      size_t bytes = reducescatterRows(dim0[t], n, k) * rowBytes;
      if (bytes > 0) {
        std::memcpy(buf + off,
                    static_cast<const uint8_t*>(cx.entries[t]->tensor.data) + firstRow * rowBytes,
                    bytes);
      }
      off += bytes;
    }
  }
  if (r.prescale != 1.0) scaleInPlace(buf, total, r.dtype, r.prescale);
  return buf;
}

// The collective itself: this rank's block of `in` (counts[k] elements for rank k) into `out`,
// summed in a wider type where the dtype needs it.
void reduceScatterBlocks(const Response& r, OpContext& cx, const void* in, void* out,
                         const std::vector<size_t>& counts, size_t total) {
  ActivityScope a(cx, r, TransportActivity{"REDUCESCATTER"});
  const int n = cx.comm.size();
  const size_t mine = counts[cx.comm.rank()];
  if (sumsWide(r)) {
    std::vector<int32_t> wideIn(total), wideOut(mine);
    widenToInt32(in, wideIn.data(), total, r.dtype);
    cx.comm.reduceScatter(wideIn.data(), wideOut.data(), counts, DataType::Int32, ReduceOp::Sum);
    narrowFromInt32(r, wideOut.data(), out, mine, n);
  } else if (sumsInFloat(r)) {
    std::vector<float> wideIn(total), wideOut(mine);
    widenToFloat32(in, wideIn.data(), total, r.dtype);
    cx.comm.reduceScatter(wideIn.data(), wideOut.data(), counts, DataType::Float32, ReduceOp::Sum);
    narrowFromFloat32Sum(r, wideOut.data(), out, mine, n);
  } else {
    ReduceOp op = r.reduceOp == ReduceOp::Average ? ReduceOp::Sum : r.reduceOp;
    cx.comm.reduceScatter(in, out, counts, r.dtype, op);
    finishReduction(r, out, mine, n);
  }
}

}  // namespace

void runReducescatter(const Response& r, OpContext& cx) {
  const int n = cx.comm.size(), me = cx.comm.rank();
  const size_t elem = dtypeSize(r.dtype);
  const size_t tensors = r.tensorCount();
  std::vector<int64_t> dim0 = firstDims(r, cx);
  std::vector<size_t> counts(n, 0);
  for (int k = 0; k < n; ++k) {
    for (size_t t = 0; t < tensors; ++t) {
      counts[k] += reducescatterRows(dim0[t], n, k) * static_cast<size_t>(r.rowElements[t]);
    }
  }
  size_t total = 0;
  for (size_t c : counts) total += c;
  bool packed = tensors > 1 || r.prescale != 1.0;
  const void* in = packed ? packBlocks(r, cx, dim0, total) : cx.entries[0]->tensor.data;

  std::vector<OutputTensor> outputs;
  for (size_t t = 0; t < tensors; ++t) {
    std::vector<int64_t> shape = cx.entries[t]->tensor.shape;
    shape[0] = static_cast<int64_t>(reducescatterRows(dim0[t], n, me));
    outputs.push_back(OutputTensor::allocate(r.dtype, shape));
  }
  // Fused: this rank's block lands in a scratch buffer, then is split into the outputs.
  OutputTensor scratch;
  void* out = outputs[0].data();
  if (tensors > 1) {
    scratch = OutputTensor::allocate(r.dtype, {static_cast<int64_t>(counts[me])});
    out = scratch.data();
  }
  reduceScatterBlocks(r, cx, in, out, counts, total);
  if (tensors > 1) {
    size_t off = 0;
    for (size_t t = 0; t < tensors; ++t) {
      size_t bytes =
          reducescatterRows(dim0[t], n, me) * static_cast<size_t>(r.rowElements[t]) * elem;
      if (bytes > 0) std::memcpy(outputs[t].data(), static_cast<uint8_t*>(out) + off, bytes);
      off += bytes;
    }
  }
  for (size_t t = 0; t < tensors; ++t) cx.entries[t]->handle->output = std::move(outputs[t]);
}

}  // namespace hora
