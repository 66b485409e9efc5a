// Adasum: combines gradients so that parallel components add and orthogonal ones do not
// double-count: adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b.
// Ranks combine by recursive doubling: at level k, rank r exchanges its current vector with rank
// r ^ 2^k and both compute adasum(lower rank's vector, higher rank's vector), so every rank ends
// with bit-identical results. Needs a power-of-two set size (checked during negotiation).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/ops/ops.h"

namespace hora {
namespace {

double load(const void* p, size_t i, DataType t) {
  switch (t) {
    case DataType::Float16: return halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return bfloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    default: throwInternal(__FILE__, __LINE__, "adasum on a non-floating dtype");
  }
}

void store(void* p, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::Float16:
      static_cast<uint16_t*>(p)[i] = floatToHalf(static_cast<float>(v));
      break;
    case DataType::BFloat16:
      static_cast<uint16_t*>(p)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
    default: throwInternal(__FILE__, __LINE__, "adasum on a non-floating dtype");
  }
}

// A norm below sqrt(DBL_MIN) counts as zero (the reference's cut-off): the dot products of
// float32 gradients near FLT_MIN (squares near 1e-76) are still well defined in double.
double coefficient(double dot, double normSq) {
  static const double kTinyNormSq = std::sqrt(std::numeric_limits<double>::min());
  return normSq >= kTinyNormSq ? 1.0 - dot / (2.0 * normSq) : 1.0;
}

// a <- adasum(a, b) elementwise over n values.
void combine(void* a, const void* b, size_t n, DataType t) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    double x = load(a, i, t), y = load(b, i, t);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  double ca = coefficient(dot, aa), cb = coefficient(dot, bb);
  for (size_t i = 0; i < n; ++i) store(a, i, t, ca * load(a, i, t) + cb * load(b, i, t));
}

}  // namespace

void runAdasum(const Response& r, OpContext& cx) {
  if (!isFloating(r.dtype)) {
    throw InvalidArgument("Adasum supports floating-point tensors only, got " +
                          std::string(dtypeName(r.dtype)) + " for '" + r.names.front() + "'");
  }
  const int size = cx.comm.size(), me = cx.comm.rank();
  ActivityScope a(cx, r, "ADASUM_ALLREDUCE");
  for (size_t t = 0; t < r.tensorCount(); ++t) {
    TensorEntry* e = cx.entries[t];
    HORA_CHECK(e != nullptr, "adasum without a local tensor");
    const size_t n = static_cast<size_t>(r.elementCounts[t]);
    const size_t bytes = n * dtypeSize(r.dtype);
    void* mine = e->tensor.data;
    if (r.prescale != 1.0) scaleInPlace(mine, n, r.dtype, r.prescale);
    std::vector<uint8_t> theirs(bytes);
    std::vector<uint8_t> lower(bytes);
    for (int dist = 1; dist < size; dist <<= 1) {
      int peer = me ^ dist;
      cx.comm.sendRecv(peer, mine, bytes, peer, theirs.data(), bytes);
      if (me < peer) {
        combine(mine, theirs.data(), n, r.dtype);
      } else {
        // Compute adasum(peer's, mine) so both sides do the same arithmetic in the same order.
        if (bytes > 0) std::memcpy(lower.data(), theirs.data(), bytes);
        combine(lower.data(), mine, n, r.dtype);
        if (bytes > 0) std::memcpy(mine, lower.data(), bytes);
      }
    }
    if (r.postscale != 1.0) scaleInPlace(mine, n, r.dtype, r.postscale);
  }
}

}  // namespace hora
