#pragma once
// Test inputs and reference reductions, written independently of core/common/reduce.cc so a bug
// there cannot hide in the reference. Buffers are raw bytes of count elements of a dtype, in host
// order.
//
// Inputs are deterministic in (seed, data rank, element index). Two kinds:
// - exact: every reduction over up to 8 ranks is exact in the dtype, so any reduction order gives
//   the same bits (small multiples of 1/2 for Sum, powers of two for Product in floating types);
// - order-revealing (floating Sum/Product only): values with full mantissas, so a different fold
//   order changes low bits.
// Integers use their full range (sums wrap) and odd values for Product (never zero), or, for
// transports that leave overflow undefined, small values whose reductions never overflow.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/dtype.h"

namespace hora {
namespace test {

using Bytes = std::vector<uint8_t>;

// Round to nearest even, as the engine narrows.
uint16_t referenceFloatToHalf(float f);
float referenceHalfToFloat(uint16_t h);
uint16_t referenceFloatToBfloat16(float f);
float referenceBfloat16ToFloat(uint16_t b);

// How the inputs of a reduction are drawn.
struct ValueKind {
  bool orderRevealing = false;  // floating Sum/Product: full mantissas (see above)
  bool integersWrap =
      true;  // integer Sum/Product: full range; else small values that never overflow
};

Bytes makeValues(uint64_t seed, int dataRank, size_t count, DataType dtype, ReduceOp op,
                 ValueKind kind);

// acc[i] = op(acc[i], x[i]) with NumPy's semantics for the dtype.
void referenceFold(uint8_t* acc, const uint8_t* x, size_t count, DataType dtype, ReduceOp op);

// ((v[m0] op v[m1]) op v[m2]) ... over the members' inputs.
Bytes referenceReduction(uint64_t seed, const std::vector<int>& members, size_t count,
                         DataType dtype, ReduceOp op, ValueKind kind);

// "" when equal, else the first differing element (as numbers) and how many differ.
std::string compareElements(const uint8_t* got, const uint8_t* want, size_t count, DataType dtype);

// Bytes for the byte-moving collectives: distinct per (seed, tag, index).
uint8_t patternByte(uint64_t seed, int tag, size_t i);

uint64_t mix64(uint64_t x);

}  // namespace test
}  // namespace hora
