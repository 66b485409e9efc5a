#pragma once
// Element-wise kernels shared by every transport and op: reduction of one buffer into another and
// scaling. Written as plain loops over typed pointers so the compiler vectorises them; float16 and
// bfloat16 are widened to float in blocks, reduced, and narrowed back (round to nearest even).
//
// Semantics: Sum/Min/Max/Product as in NumPy for each dtype (integers wrap); for bool, Sum and Max
// are logical OR, Product and Min logical AND. Average and Adasum are not element-wise kernels and
// are rejected here (HORA_CHECK).
#include <cstddef>
#include <cstdint>

#include "core/common/dtype.h"

namespace hora {

// dst[i] = op(dst[i], src[i]) for i < count.
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor for i < count. Integers: the product is computed in double and truncated toward
// zero, as Horovod does for Average on integer tensors. Bool: unchanged unless factor == 0.
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor);

// Conversions used by the kernels and by tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace hora
