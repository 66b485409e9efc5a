#include <cstring>

#include "core/common/errors.h"
#include "core/ops/ops.h"

namespace hora {
namespace {

std::vector<int64_t> outputShape(const TensorEntry& e, int64_t rows) {
  std::vector<int64_t> shape = e.tensor.shape;
  shape[0] = rows;
  return shape;
}

const char* allgatherActivity(const OpContext& cx) {
  return cx.comm.hierarchicalAllgather() ? "HIERARCHICAL_ALLGATHER" : "ALLGATHER";
}

}  // namespace

// Fused layout: the buffer holds one block per rank, in rank order; rank r's block is tensor 0's
// rows from r, then tensor 1's rows from r, and so on. Each rank packs its own block in place and
// one allgatherv fills the rest.
void runAllgather(const Response& r, OpContext& cx) {
  const int n = cx.comm.size(), me = cx.comm.rank();
  const size_t elem = dtypeSize(r.dtype);
  const size_t tensors = r.tensorCount();
  auto rows = [&](size_t t, int rank) { return static_cast<size_t>(r.gatheredRows[t * n + rank]); };
  auto rowBytes = [&](size_t t) { return static_cast<size_t>(r.rowElements[t]) * elem; };

  std::vector<size_t> blockBytes(n, 0);
  for (int k = 0; k < n; ++k) {
    for (size_t t = 0; t < tensors; ++t) blockBytes[k] += rows(t, k) * rowBytes(t);
  }
  std::vector<OutputTensor> outputs;
  for (size_t t = 0; t < tensors; ++t) {
    TensorEntry* e = cx.entries[t];
    HORA_CHECK(e != nullptr, "allgather without a local tensor");
    int64_t total = 0;
    for (int k = 0; k < n; ++k) total += static_cast<int64_t>(rows(t, k));
    outputs.push_back(OutputTensor::allocate(r.dtype, outputShape(*e, total)));
  }

  if (tensors == 1) {
    ActivityScope a(cx, r, TransportActivity{allgatherActivity(cx)});
    cx.comm.allgatherv(cx.entries[0]->tensor.data, outputs[0].data(), blockBytes);
  } else {
    size_t total = 0, mine = 0;
    for (int k = 0; k < n; ++k) {
      if (k == me) mine = total;
      total += blockBytes[k];
    }
    uint8_t* buf = cx.fusion.reserve(total);
    {
      ActivityScope a(cx, r, "MEMCPY_IN_FUSION_BUFFER");
      size_t off = mine;
      for (size_t t = 0; t < tensors; ++t) {
        size_t bytes = rows(t, me) * rowBytes(t);
        if (bytes > 0) std::memcpy(buf + off, cx.entries[t]->tensor.data, bytes);
        off += bytes;
      }
    }
    {
      ActivityScope a(cx, r, TransportActivity{allgatherActivity(cx)});
      cx.comm.allgatherv(buf + mine, buf, blockBytes);
    }
    ActivityScope a(cx, r, "MEMCPY_OUT_FUSION_BUFFER");
    std::vector<size_t> written(tensors, 0);
    size_t src = 0;
    for (int k = 0; k < n; ++k) {
      for (size_t t = 0; t < tensors; ++t) {
        size_t bytes = rows(t, k) * rowBytes(t);
        if (bytes > 0) {
          std::memcpy(static_cast<uint8_t*>(outputs[t].data()) + written[t], buf + src, bytes);
        }
        written[t] += bytes;
        src += bytes;
      }
    }
  }
  for (size_t t = 0; t < tensors; ++t) cx.entries[t]->handle->output = std::move(outputs[t]);
}

}  // namespace hora
