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

// buf[i] *= factor for i < count, in the arithmetic Horovod uses so results are bit-identical:
// float32 multiplies by float(factor) in float, float64 in double, float16 and bfloat16 widen to
// float and multiply by float(factor). Integers: the product is computed in double and truncated
// toward zero (saturating where the type would overflow). Bool: unchanged unless factor == 0.
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor);

// buf[i] /= divisor for i < count: floats divide in their own type (float16 and bfloat16 in
// float), integers divide exactly, truncating toward zero. Bool: unchanged.
void divideInPlace(void* buf, size_t count, DataType dtype, int divisor);

// The integer types narrower than 32 bits, whose Average is summed in int32 so that a sum over
// three or more ranks cannot wrap before the division.
bool averagesInInt32(DataType dtype);

// dst[i] = int32(src[i]) for an 8- or 16-bit integer dtype.
void widenToInt32(const void* src, int32_t* dst, size_t count, DataType dtype);

// dst[i] = src[i] * factor computed in double, truncated toward zero and saturated to dtype (an
// 8- or 16-bit integer type), as scaleInPlace does for integers.
void narrowScaledFromInt32(const int32_t* src, void* dst, size_t count, DataType dtype,
                           double factor);

// dst[i] = src[i] / divisor, truncated toward zero and saturated to dtype (8- or 16-bit).
void narrowDividedFromInt32(const int32_t* src, void* dst, size_t count, DataType dtype,
                            int divisor);

// float16 and bfloat16, whose Sum and Average are summed in float32 and rounded once at the end,
// so a sum over three or more ranks does not round at every step.
bool sumsInFloat32(DataType dtype);

// dst[i] = float(src[i]) for a float16 or bfloat16 dtype.
void widenToFloat32(const void* src, float* dst, size_t count, DataType dtype);

// dst[i] = src[i] rounded to nearest even in a float16 or bfloat16 dtype.
void narrowFromFloat32(const float* src, void* dst, size_t count, DataType dtype);

// Conversions used by the kernels and by tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace hora
