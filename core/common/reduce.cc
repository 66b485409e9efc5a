#include "core/common/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/common/errors.h"

namespace hora {
namespace {

// ---- float16 / bfloat16 conversions -------------------------------------------------------
// Written as selects over plain integer arithmetic (no data-dependent branches) so the block
// loops below can be vectorised.

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float widenHalf(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t magnitude = h & 0x7fffu;  // exponent and mantissa
  // Normal numbers: rebias the exponent from 15 to 127 (add 112). Inf/NaN: exponent 31 -> 255
  // (add 224), mantissa (NaN payload) kept. Subnormals: mantissa * 2^-24, exact in float.
  uint32_t normal = (magnitude << 13) + (112u << 23);
  uint32_t special = (magnitude << 13) + (224u << 23);
  uint32_t subnormal = floatBits(float(int32_t(magnitude)) * 5.9604644775390625e-8f);
  uint32_t bits = magnitude < 0x0400u ? subnormal : (magnitude >= 0x7c00u ? special : normal);
  return bitsFloat(bits | sign);
}

inline uint16_t narrowHalf(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  // Normal range: rebias (subtract 112 << 23), then round to nearest even at bit 13: add half an
  // ulp minus one plus the lowest kept bit, and truncate.
  uint32_t normal = (a - (112u << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below the smallest normal half (2^-14): adding 0.5f puts the half's subnormal unit (2^-24) at
  // float's last mantissa bit, so the FPU does the round-to-nearest-even for us.
  uint32_t subnormal = floatBits(bitsFloat(a) + 0.5f) - 0x3f000000u;
  // Anything that rounds to 65520 or more overflows to infinity; NaN stays NaN (quiet).
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
  uint32_t r = a < 0x38800000u ? subnormal : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? nan : r;
  return uint16_t(r | sign);
}

inline float widenBfloat16(uint16_t b) { return bitsFloat(uint32_t(b) << 16); }

inline uint16_t narrowBfloat16(float f) {
  uint32_t x = floatBits(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x0040u;
  return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// ---- element-wise operations -------------------------------------------------------------

// Integer sums and products wrap (as in NumPy). Signed overflow is undefined in C++, so the
// arithmetic happens in an unsigned type at least as wide as int (no promotion back to int).
template <typename T, bool = std::is_integral_v<T>>
struct Arithmetic {
  using type = T;
};
template <typename T>
struct Arithmetic<T, true> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(uint32_t)), uint32_t, std::make_unsigned_t<T>>;
};
template <typename T>
using ArithmeticType = typename Arithmetic<T>::type;

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    using A = ArithmeticType<T>;
    return T(A(a) + A(b));
  }
};

struct ProductOp {
  template <typename T>
  static T apply(T a, T b) {
    using A = ArithmeticType<T>;
    return T(A(a) * A(b));
  }
};

// Min and max propagate NaN from either side, like numpy.minimum / numpy.maximum.
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct OrOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return uint8_t((a != 0) | (b != 0)); }
};

struct AndOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return uint8_t((a != 0) & (b != 0)); }
};

// ---- kernels -----------------------------------------------------------------------------

template <typename Op, typename T>
void reduceLoop(T* __restrict dst, const T* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(dst[i], src[i]);
}

// Elements per widening block: two float arrays of this size stay in L1.
constexpr size_t kWidenBlock = 256;

template <typename Op, float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduceNarrowLoop(uint16_t* __restrict dst, const uint16_t* __restrict src, size_t count) {
  float a[kWidenBlock];
  float b[kWidenBlock];
  for (size_t base = 0; base < count; base += kWidenBlock) {
    size_t n = std::min(kWidenBlock, count - base);
    uint16_t* __restrict d = dst + base;
    const uint16_t* __restrict s = src + base;
    for (size_t i = 0; i < n; ++i) a[i] = Widen(d[i]);
    for (size_t i = 0; i < n; ++i) b[i] = Widen(s[i]);
    for (size_t i = 0; i < n; ++i) a[i] = Op::apply(a[i], b[i]);
    for (size_t i = 0; i < n; ++i) d[i] = Narrow(a[i]);
  }
}

[[noreturn]] void badOp(ReduceOp op, DataType dtype) {
  HORA_CHECK(false, std::string("reduceInto does not handle op ") + reduceOpName(op) + " for " +
                        dtypeName(dtype) +
                        " (Average is Sum plus scaling; Adasum is an algorithm)");
  throw 0;  // unreachable: HORA_CHECK(false) throws
}

template <typename T>
void reduceTyped(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::Sum: return reduceLoop<SumOp>(d, s, count);
    case ReduceOp::Product: return reduceLoop<ProductOp>(d, s, count);
    case ReduceOp::Min: return reduceLoop<MinOp>(d, s, count);
    case ReduceOp::Max: return reduceLoop<MaxOp>(d, s, count);
    default: badOp(op, dtype);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduceNarrow(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* s = static_cast<const uint16_t*>(src);
  switch (op) {
    case ReduceOp::Sum: return reduceNarrowLoop<SumOp, Widen, Narrow>(d, s, count);
    case ReduceOp::Product: return reduceNarrowLoop<ProductOp, Widen, Narrow>(d, s, count);
    case ReduceOp::Min: return reduceNarrowLoop<MinOp, Widen, Narrow>(d, s, count);
    case ReduceOp::Max: return reduceNarrowLoop<MaxOp, Widen, Narrow>(d, s, count);
    default: badOp(op, dtype);
  }
}

void reduceBool(void* dst, const void* src, size_t count, ReduceOp op) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max: return reduceLoop<OrOp>(d, s, count);
    case ReduceOp::Product:
    case ReduceOp::Min: return reduceLoop<AndOp>(d, s, count);
    default: badOp(op, DataType::Bool);
  }
}

// ---- scaling -----------------------------------------------------------------------------

// The factor is first rounded to T, then multiplied in T: Horovod's CPU scaling.
template <typename T>
void scaleFloating(T* __restrict p, size_t count, double factor) {
  const T f = static_cast<T>(factor);
  for (size_t i = 0; i < count; ++i) p[i] = f * p[i];
}

// v truncated toward zero; saturates instead of overflowing the type.
template <typename T>
inline T truncSaturate(double v) {
  const double lo = double(std::numeric_limits<T>::min());
  const double hi = double(std::numeric_limits<T>::max());
  T r = v >= hi ? std::numeric_limits<T>::max() : T(0);
  r = v <= lo ? std::numeric_limits<T>::min() : r;
  return (v > lo && v < hi) ? T(v) : r;  // NaN fails every comparison and becomes 0
}

// Product in double, truncated toward zero.
template <typename T>
void scaleInteger(T* __restrict p, size_t count, double factor) {
  for (size_t i = 0; i < count; ++i) p[i] = truncSaturate<T>(factor * double(p[i]));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void scaleNarrow(uint16_t* __restrict p, size_t count, double factor) {
  const float f = static_cast<float>(factor);
  float a[kWidenBlock];
  for (size_t base = 0; base < count; base += kWidenBlock) {
    size_t n = std::min(kWidenBlock, count - base);
    uint16_t* __restrict d = p + base;
    for (size_t i = 0; i < n; ++i) a[i] = f * Widen(d[i]);
    for (size_t i = 0; i < n; ++i) d[i] = Narrow(a[i]);
  }
}

template <typename T>
void divideTyped(T* __restrict p, size_t count, int divisor) {
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divideNarrow(uint16_t* __restrict p, size_t count, int divisor) {
  const float d = static_cast<float>(divisor);
  float a[kWidenBlock];
  for (size_t base = 0; base < count; base += kWidenBlock) {
    size_t n = std::min(kWidenBlock, count - base);
    uint16_t* __restrict q = p + base;
    for (size_t i = 0; i < n; ++i) a[i] = Widen(q[i]) / d;
    for (size_t i = 0; i < n; ++i) q[i] = Narrow(a[i]);
  }
}

template <typename T>
void narrowDividedTyped(const int32_t* __restrict src, void* dst, size_t count, int divisor) {
  T* __restrict d = static_cast<T*>(dst);
  const int32_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  for (size_t i = 0; i < count; ++i) d[i] = T(std::clamp(src[i] / divisor, lo, hi));
}

template <typename T>
void widenTyped(const void* src, int32_t* __restrict dst, size_t count) {
  const T* __restrict s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) dst[i] = int32_t(s[i]);
}

template <typename T>
void narrowTyped(const int32_t* __restrict src, void* dst, size_t count, double factor) {
  T* __restrict d = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) d[i] = truncSaturate<T>(factor * double(src[i]));
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::UInt8: return reduceTyped<uint8_t>(dst, src, count, dtype, op);
    case DataType::Int8: return reduceTyped<int8_t>(dst, src, count, dtype, op);
    case DataType::UInt16: return reduceTyped<uint16_t>(dst, src, count, dtype, op);
    case DataType::Int16: return reduceTyped<int16_t>(dst, src, count, dtype, op);
    case DataType::Int32: return reduceTyped<int32_t>(dst, src, count, dtype, op);
    case DataType::Int64: return reduceTyped<int64_t>(dst, src, count, dtype, op);
    case DataType::Float32: return reduceTyped<float>(dst, src, count, dtype, op);
    case DataType::Float64: return reduceTyped<double>(dst, src, count, dtype, op);
    case DataType::Float16: return reduceNarrow<widenHalf, narrowHalf>(dst, src, count, dtype, op);
    case DataType::BFloat16:
      return reduceNarrow<widenBfloat16, narrowBfloat16>(dst, src, count, dtype, op);
    case DataType::Bool: return reduceBool(dst, src, count, op);
  }
  HORA_CHECK(false, "unknown dtype " + std::to_string(int(dtype)));
}

void scaleInPlace(void* buf, size_t count, DataType dtype, double factor) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::UInt8: return scaleInteger(static_cast<uint8_t*>(buf), count, factor);
    case DataType::Int8: return scaleInteger(static_cast<int8_t*>(buf), count, factor);
    case DataType::UInt16: return scaleInteger(static_cast<uint16_t*>(buf), count, factor);
    case DataType::Int16: return scaleInteger(static_cast<int16_t*>(buf), count, factor);
    case DataType::Int32: return scaleInteger(static_cast<int32_t*>(buf), count, factor);
    case DataType::Int64: return scaleInteger(static_cast<int64_t*>(buf), count, factor);
    case DataType::Float32: return scaleFloating(static_cast<float*>(buf), count, factor);
    case DataType::Float64: return scaleFloating(static_cast<double*>(buf), count, factor);
    case DataType::Float16:
      return scaleNarrow<widenHalf, narrowHalf>(static_cast<uint16_t*>(buf), count, factor);
    case DataType::BFloat16:
      return scaleNarrow<widenBfloat16, narrowBfloat16>(static_cast<uint16_t*>(buf), count, factor);
    case DataType::Bool:
      if (factor == 0.0) std::memset(buf, 0, count);
      return;
  }
  HORA_CHECK(false, "unknown dtype " + std::to_string(int(dtype)));
}

bool averagesInInt32(DataType dtype) {
  return dtype == DataType::UInt8 || dtype == DataType::Int8 || dtype == DataType::UInt16 ||
         dtype == DataType::Int16;
}

void widenToInt32(const void* src, int32_t* dst, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return widenTyped<uint8_t>(src, dst, count);
    case DataType::Int8: return widenTyped<int8_t>(src, dst, count);
    case DataType::UInt16: return widenTyped<uint16_t>(src, dst, count);
    case DataType::Int16: return widenTyped<int16_t>(src, dst, count);
    default: HORA_CHECK(false, "widenToInt32 on " + std::string(dtypeName(dtype)));
  }
}

void narrowScaledFromInt32(const int32_t* src, void* dst, size_t count, DataType dtype,
                           double factor) {
  switch (dtype) {
    case DataType::UInt8: return narrowTyped<uint8_t>(src, dst, count, factor);
    case DataType::Int8: return narrowTyped<int8_t>(src, dst, count, factor);
    case DataType::UInt16: return narrowTyped<uint16_t>(src, dst, count, factor);
    case DataType::Int16: return narrowTyped<int16_t>(src, dst, count, factor);
    default: HORA_CHECK(false, "narrowScaledFromInt32 on " + std::string(dtypeName(dtype)));
  }
}

void divideInPlace(void* buf, size_t count, DataType dtype, int divisor) {
  if (count == 0 || divisor == 1) return;
  HORA_CHECK(divisor > 0, "divideInPlace by " + std::to_string(divisor));
  switch (dtype) {
    case DataType::UInt8: return divideTyped(static_cast<uint8_t*>(buf), count, divisor);
    case DataType::Int8: return divideTyped(static_cast<int8_t*>(buf), count, divisor);
    case DataType::UInt16: return divideTyped(static_cast<uint16_t*>(buf), count, divisor);
    case DataType::Int16: return divideTyped(static_cast<int16_t*>(buf), count, divisor);
    case DataType::Int32: return divideTyped(static_cast<int32_t*>(buf), count, divisor);
    case DataType::Int64: return divideTyped(static_cast<int64_t*>(buf), count, divisor);
    case DataType::Float32: return divideTyped(static_cast<float*>(buf), count, divisor);
    case DataType::Float64: return divideTyped(static_cast<double*>(buf), count, divisor);
    case DataType::Float16:
      return divideNarrow<widenHalf, narrowHalf>(static_cast<uint16_t*>(buf), count, divisor);
    case DataType::BFloat16:
      return divideNarrow<widenBfloat16, narrowBfloat16>(static_cast<uint16_t*>(buf), count,
                                                         divisor);
    case DataType::Bool: return;
  }
  HORA_CHECK(false, "unknown dtype " + std::to_string(int(dtype)));
}

void narrowDividedFromInt32(const int32_t* src, void* dst, size_t count, DataType dtype,
                            int divisor) {
  switch (dtype) {
    case DataType::UInt8: return narrowDividedTyped<uint8_t>(src, dst, count, divisor);
    case DataType::Int8: return narrowDividedTyped<int8_t>(src, dst, count, divisor);
    case DataType::UInt16: return narrowDividedTyped<uint16_t>(src, dst, count, divisor);
    case DataType::Int16: return narrowDividedTyped<int16_t>(src, dst, count, divisor);
    default: HORA_CHECK(false, "narrowDividedFromInt32 on " + std::string(dtypeName(dtype)));
  }
}

bool sumsInFloat32(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16;
}

void widenToFloat32(const void* src, float* dst, size_t count, DataType dtype) {
  HORA_CHECK(sumsInFloat32(dtype), "widenToFloat32 on " + std::string(dtypeName(dtype)));
  const auto* in = static_cast<const uint16_t*>(src);
  if (dtype == DataType::Float16) {
    for (size_t i = 0; i < count; ++i) dst[i] = widenHalf(in[i]);
  } else {
    for (size_t i = 0; i < count; ++i) dst[i] = widenBfloat16(in[i]);
  }
}

void narrowFromFloat32(const float* src, void* dst, size_t count, DataType dtype) {
  HORA_CHECK(sumsInFloat32(dtype), "narrowFromFloat32 on " + std::string(dtypeName(dtype)));
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == DataType::Float16) {
    for (size_t i = 0; i < count; ++i) out[i] = narrowHalf(src[i]);
  } else {
    for (size_t i = 0; i < count; ++i) out[i] = narrowBfloat16(src[i]);
  }
}

float halfToFloat(uint16_t h) { return widenHalf(h); }
uint16_t floatToHalf(float f) { return narrowHalf(f); }
float bfloat16ToFloat(uint16_t b) { return widenBfloat16(b); }
uint16_t floatToBfloat16(float f) { return narrowBfloat16(f); }

}  // namespace hora
