#include <cstring>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/ops/ops.h"

namespace hora {

double effectivePostscale(const Response& r, int setSize) {
  // Divided, not multiplied by 1/size: the factor must be the same double as the reference's.
  return r.reduceOp == ReduceOp::Average ? r.postscale / setSize : r.postscale;
}

bool dividesBySize(const Response& r) {
  return r.reduceOp == ReduceOp::Average && r.postscale == 1.0;
}

void finishReduction(const Response& r, DataType dtype, void* buf, size_t count, int setSize) {
  if (dividesBySize(r)) {
    divideInPlace(buf, count, dtype, setSize);
    return;
  }
  double post = effectivePostscale(r, setSize);
  if (post != 1.0) scaleInPlace(buf, count, dtype, post);
}

void finishReduction(const Response& r, void* buf, size_t count, int setSize) {
  finishReduction(r, r.dtype, buf, count, setSize);
}

void narrowFromInt32(const Response& r, const int32_t* wide, void* out, size_t count, int setSize) {
  if (dividesBySize(r)) {
    narrowDividedFromInt32(wide, out, count, r.dtype, setSize);
  } else {
    narrowScaledFromInt32(wide, out, count, r.dtype, effectivePostscale(r, setSize));
  }
}

void narrowFromFloat32Sum(const Response& r, float* wide, void* out, size_t count, int setSize) {
  if (dividesBySize(r)) {
    divideInPlace(wide, count, DataType::Float32, setSize);
    narrowFromFloat32(wide, out, count, r.dtype);
    return;
  }
  narrowFromFloat32(wide, out, count, r.dtype);
  double post = effectivePostscale(r, setSize);
  if (post != 1.0) scaleInPlace(out, count, r.dtype, post);
}

bool sumsWide(const Response& r) {
  return r.reduceOp == ReduceOp::Average && averagesInInt32(r.dtype);
}

bool sumsInFloat(const Response& r) {
  return (r.reduceOp == ReduceOp::Sum || r.reduceOp == ReduceOp::Average) && sumsInFloat32(r.dtype);
}

bool foldsFromPayloads(const Response& r, int setSize, size_t maxBytes) {
  if (r.kind != OpKind::Allreduce || r.tensorCount() != 1 || setSize < 2 || r.prescale != 1.0 ||
      sumsWide(r) || sumsInFloat(r)) {
    return false;
  }
  return static_cast<size_t>(r.elementCounts[0]) * dtypeSize(r.dtype) <= maxBytes;
}

// Such an allreduce of one of this rank's own tensors, folded from every rank's data in rank order
// (`payloads`) instead of exchanged.
void allreduceFolded(const Response& r, OpContext& cx, ReduceOp op,
                     const std::vector<const uint8_t*>& payloads) {
  HORA_CHECK(r.tensorCount() == 1 && cx.entries[0] != nullptr &&
                 payloads.size() == static_cast<size_t>(cx.comm.size()),
             "an allreduce folded from payloads needs its own tensor and every rank's data");
  ActivityScope a(cx, r, TransportActivity{"ALLREDUCE"});
  const size_t count = static_cast<size_t>(r.elementCounts[0]);
  void* buf = cx.entries[0]->tensor.data;
  if (count == 0) return;
  // Rank 0's first, then the others in rank order: as the shared payload folds them.
  std::memcpy(buf, payloads[0], count * dtypeSize(r.dtype));
  for (size_t k = 1; k < payloads.size(); ++k) reduceInto(buf, payloads[k], count, r.dtype, op);
  finishReduction(r, buf, count, cx.comm.size());
}

// The tensors reduced where they lie, by a communicator that takes them unfused
// (Communicator::reducesPieces): the scaling runs on each tensor, element by element, as it would
// on the fusion buffer.
void allreducePieces(const Response& r, OpContext& cx, ReduceOp op, size_t total) {
  const size_t elem = dtypeSize(r.dtype);
  std::vector<BufferPiece> pieces;
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    void* data = cx.entries[t] != nullptr ? cx.entries[t]->tensor.data : nullptr;
    pieces.push_back({data, static_cast<size_t>(r.elementCounts[t]) * elem});
  }
  ActivityScope a(cx, r, TransportActivity{"ALLREDUCE"});
  if (r.prescale != 1.0) {
    for (const auto& p : pieces) {
      if (p.data != nullptr) scaleInPlace(p.data, p.bytes / elem, r.dtype, r.prescale);
    }
  }
  cx.comm.allreducePieces(pieces, total, r.dtype, op);
  for (const auto& p : pieces) {
    if (p.data != nullptr) finishReduction(r, p.data, p.bytes / elem, cx.comm.size());
  }
}

void runAllreduce(const Response& r, OpContext& cx) {
  const ReduceOp op = r.reduceOp == ReduceOp::Average ? ReduceOp::Sum : r.reduceOp;
  if (cx.payloads != nullptr) {
    allreduceFolded(r, cx, op, *cx.payloads);
    return;
  }
  const size_t elem = dtypeSize(r.dtype);
  size_t total = 0;
  for (int64_t n : r.elementCounts) total += static_cast<size_t>(n);
  if (!sumsWide(r) && !sumsInFloat(r) && cx.comm.reducesPieces(total, r.dtype, op)) {
    allreducePieces(r, cx, op, total);
    return;
  }

  // One tensor of our own runs in place; fused tensors, and zeros for a joined rank, run in the
  // persistent fusion buffer.
  bool inPlace = r.tensorCount() == 1 && cx.entries[0] != nullptr;
  uint8_t* buf =
      inPlace ? static_cast<uint8_t*>(cx.entries[0]->tensor.data) : cx.fusion.reserve(total * elem);
  if (!inPlace) {
    ActivityScope a(cx, r, "MEMCPY_IN_FUSION_BUFFER");
    size_t off = 0;
    for (size_t t = 0; t < r.tensorCount(); ++t) {
      size_t bytes = static_cast<size_t>(r.elementCounts[t]) * elem;
      if (cx.entries[t] != nullptr) {
        if (bytes > 0) std::memcpy(buf + off, cx.entries[t]->tensor.data, bytes);
      } else {
        std::memset(buf + off, 0, bytes);
      }
      off += bytes;
    }
  }

  {
    ActivityScope a(cx, r,
                    TransportActivity{cx.comm.hierarchicalAllreduce() ? "HIERARCHICAL_ALLREDUCE"
                                                                      : "ALLREDUCE"});
    if (r.prescale != 1.0) scaleInPlace(buf, total, r.dtype, r.prescale);
    if (sumsWide(r)) {
      std::vector<int32_t> wide(total);
      widenToInt32(buf, wide.data(), total, r.dtype);
      cx.comm.allreduce(wide.data(), total, DataType::Int32, ReduceOp::Sum);
      narrowFromInt32(r, wide.data(), buf, total, cx.comm.size());
    } else if (sumsInFloat(r)) {
      std::vector<float> wide(total);
      widenToFloat32(buf, wide.data(), total, r.dtype);
      cx.comm.allreduce(wide.data(), total, DataType::Float32, ReduceOp::Sum);
      narrowFromFloat32Sum(r, wide.data(), buf, total, cx.comm.size());
    } else {
      cx.comm.allreduce(buf, total, r.dtype, op);
      finishReduction(r, buf, total, cx.comm.size());
    }
  }

  if (!inPlace) {
    ActivityScope a(cx, r, "MEMCPY_OUT_FUSION_BUFFER");
    size_t off = 0;
    for (size_t t = 0; t < r.tensorCount(); ++t) {
      size_t bytes = static_cast<size_t>(r.elementCounts[t]) * elem;
      if (cx.entries[t] != nullptr && bytes > 0) {
        std::memcpy(cx.entries[t]->tensor.data, buf + off, bytes);
      }
      off += bytes;
    }
  }
}

}  // namespace hora
