#include "tests/cpp/reference_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace hora {
namespace test {
namespace {

template <typename T>
T load(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Rounds |x| (finite, below the overflow bound) to `bits` significant bits, nearest even, with
// exponents below minExp treated as subnormal; returns (biased exponent << mantissaBits) |
// mantissa.
uint32_t roundMagnitude(double a, int mantissaBits, int bias, int minExp) {
  if (a == 0) return 0;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit has weight 2^(e-1)
  int lead = std::max(e - 1, minExp);
  double scaled = std::ldexp(a, mantissaBits - lead);      // exact: a power-of-two scaling
  auto q = static_cast<uint32_t>(std::nearbyint(scaled));  // the default mode rounds half to even
  uint32_t one = 1u << mantissaBits;
  if (e - 1 < minExp) return q;  // subnormal; q == one is exactly the smallest normal's encoding
  if (q == 2 * one) {            // rounding carried into the next binade
    q = one;
    ++lead;
  }
  return (static_cast<uint32_t>(lead + bias) << mantissaBits) | (q - one);
}

template <typename T>
T intOp(T a, T b, ReduceOp op) {
  // Wrapping arithmetic as in NumPy: modulo 2^64, then truncated to the type.
  using W = uint64_t;
  switch (op) {
    case ReduceOp::Sum: return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
    case ReduceOp::Product: return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    default: return a;
  }
}

template <typename F>
F floatOp(F a, F b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Product: return a * b;
    case ReduceOp::Min: return b < a ? b : a;
    case ReduceOp::Max: return b > a ? b : a;
    default: return a;
  }
}

template <typename T>
void foldInts(uint8_t* acc, const uint8_t* x, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) store<T>(acc, i, intOp(load<T>(acc, i), load<T>(x, i), op));
}

template <typename F>
void foldFloats(uint8_t* acc, const uint8_t* x, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) store<F>(acc, i, floatOp(load<F>(acc, i), load<F>(x, i), op));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void foldNarrow(uint8_t* acc, const uint8_t* x, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    float r = floatOp(Widen(load<uint16_t>(acc, i)), Widen(load<uint16_t>(x, i)), op);
    store<uint16_t>(acc, i, Narrow(r));
  }
}

double elementAsNumber(const uint8_t* p, size_t i, DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return load<uint8_t>(p, i);
    case DataType::Int8: return load<int8_t>(p, i);
    case DataType::UInt16: return load<uint16_t>(p, i);
    case DataType::Int16: return load<int16_t>(p, i);
    case DataType::Int32: return load<int32_t>(p, i);
    case DataType::Int64: return static_cast<double>(load<int64_t>(p, i));
    case DataType::Float16: return referenceHalfToFloat(load<uint16_t>(p, i));
    case DataType::BFloat16: return referenceBfloat16ToFloat(load<uint16_t>(p, i));
    case DataType::Float32: return load<float>(p, i);
    case DataType::Float64: return load<double>(p, i);
    case DataType::Bool: return p[i];
  }
  return 0;
}

std::string numberText(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// Floating inputs (as double; narrowed to the dtype by the caller).
double floatingValue(uint64_t h, int dataRank, DataType dtype, ReduceOp op, bool orderRevealing) {
  double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  double sign = (h & 1) ? -1.0 : 1.0;
  bool narrow = dtype == DataType::Float16 || dtype == DataType::BFloat16;
  if (op == ReduceOp::Min || op == ReduceOp::Max) return sign * u * (narrow ? 100.0 : 1e6);
  if (op == ReduceOp::Product) {
    if (orderRevealing) return sign * (0.5 + 1.5 * u);
    static const double kPowers[] = {1.0, 2.0, 0.5};
    return sign * kPowers[(h >> 1) % 3];
  }
  if (orderRevealing) {
    // Odd ranks contribute small values, so how they are grouped shows in the low bits.
    double scale = narrow ? 8.0 : 1000.0;
    return (2 * u - 1) * scale * (dataRank % 2 == 1 ? 1e-2 : 1.0);
  }
  return static_cast<double>(static_cast<int>((h >> 1) % 17) - 8) * 0.5;
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint16_t referenceFloatToHalf(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  return static_cast<uint16_t>(sign | roundMagnitude(a, 10, 15, -14));
}

float referenceHalfToFloat(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -24);
  } else if (e == 31) {
    v = m != 0 ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(1024 + m), e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

uint16_t referenceFloatToBfloat16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7fc0;
  if (std::isinf(f)) return sign | 0x7f80;
  double a = std::fabs(static_cast<double>(f));
  // The largest finite bfloat16 is (2 - 2^-7) * 2^127; halfway above it rounds to infinity.
  if (a >= std::ldexp(2.0 - 0x1.0p-8, 127)) return sign | 0x7f80;
  return static_cast<uint16_t>(sign | roundMagnitude(a, 7, 127, -126));
}

float referenceBfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

Bytes makeValues(uint64_t seed, int dataRank, size_t count, DataType dtype, ReduceOp op,
                 ValueKind kind) {
  const bool orderRevealing = kind.orderRevealing;
  const bool isSigned = dtype == DataType::Int8 || dtype == DataType::Int16 ||
                        dtype == DataType::Int32 || dtype == DataType::Int64;
  Bytes b(count * dtypeSize(dtype));
  uint8_t* p = b.data();
  const uint64_t base = mix64(seed ^ mix64(static_cast<uint64_t>(dataRank) + 0x51ed27));
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = mix64(base + i);
    uint64_t raw = op == ReduceOp::Product ? (h | 1) : h;
    if (!kind.integersWrap && (op == ReduceOp::Sum || op == ReduceOp::Product)) {
      // |sum| <= 4 per rank; products of 1, 2 (on the first six ranks only) and -1 stay within
      // int8.
      int64_t v = op == ReduceOp::Sum ? static_cast<int64_t>(h % 9) - 4
                                      : ((h % 3 == 0 && dataRank < 6) ? 2 : 1);
      if (op == ReduceOp::Product && isSigned && (h & 8)) v = -v;
      if (!isSigned && v < 0) v = -v;
      raw = static_cast<uint64_t>(v);
    }
    switch (dtype) {
      case DataType::UInt8: store<uint8_t>(p, i, static_cast<uint8_t>(raw)); break;
      case DataType::Int8: store<int8_t>(p, i, static_cast<int8_t>(raw)); break;
      case DataType::UInt16: store<uint16_t>(p, i, static_cast<uint16_t>(raw)); break;
      case DataType::Int16: store<int16_t>(p, i, static_cast<int16_t>(raw)); break;
      case DataType::Int32: store<int32_t>(p, i, static_cast<int32_t>(raw)); break;
      case DataType::Int64: store<int64_t>(p, i, static_cast<int64_t>(raw)); break;
      case DataType::Bool:
        // Mostly true for AND-like ops, mostly false for OR-like ones, so results vary.
        p[i] = (op == ReduceOp::Product || op == ReduceOp::Min) ? (h % 8 != 0) : (h % 5 == 0);
        break;
      case DataType::Float16:
        store<uint16_t>(p, i,
                        referenceFloatToHalf(static_cast<float>(
                            floatingValue(h, dataRank, dtype, op, orderRevealing))));
        break;
      case DataType::BFloat16:
        store<uint16_t>(p, i,
                        referenceFloatToBfloat16(static_cast<float>(
                            floatingValue(h, dataRank, dtype, op, orderRevealing))));
        break;
      case DataType::Float32:
        store<float>(p, i,
                     static_cast<float>(floatingValue(h, dataRank, dtype, op, orderRevealing)));
        break;
      case DataType::Float64:
        store<double>(p, i, floatingValue(h, dataRank, dtype, op, orderRevealing));
        break;
    }
  }
  return b;
}

void referenceFold(uint8_t* acc, const uint8_t* x, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::UInt8: return foldInts<uint8_t>(acc, x, count, op);
    case DataType::Int8: return foldInts<int8_t>(acc, x, count, op);
    case DataType::UInt16: return foldInts<uint16_t>(acc, x, count, op);
    case DataType::Int16: return foldInts<int16_t>(acc, x, count, op);
    case DataType::Int32: return foldInts<int32_t>(acc, x, count, op);
    case DataType::Int64: return foldInts<int64_t>(acc, x, count, op);
    case DataType::Float32: return foldFloats<float>(acc, x, count, op);
    case DataType::Float64: return foldFloats<double>(acc, x, count, op);
    case DataType::Float16:
      return foldNarrow<referenceHalfToFloat, referenceFloatToHalf>(acc, x, count, op);
    case DataType::BFloat16:
      return foldNarrow<referenceBfloat16ToFloat, referenceFloatToBfloat16>(acc, x, count, op);
    case DataType::Bool: {
      bool orLike = op == ReduceOp::Sum || op == ReduceOp::Max;
      for (size_t i = 0; i < count; ++i) {
        acc[i] = orLike ? ((acc[i] | x[i]) != 0) : ((acc[i] & x[i]) != 0);
      }
      return;
    }
  }
}

Bytes referenceReduction(uint64_t seed, const std::vector<int>& members, size_t count,
                         DataType dtype, ReduceOp op, ValueKind kind) {
  Bytes acc = makeValues(seed, members[0], count, dtype, op, kind);
  for (size_t k = 1; k < members.size(); ++k) {
    Bytes x = makeValues(seed, members[k], count, dtype, op, kind);
    referenceFold(acc.data(), x.data(), count, dtype, op);
  }
  return acc;
}

std::string compareElements(const uint8_t* got, const uint8_t* want, size_t count, DataType dtype) {
  const size_t es = dtypeSize(dtype);
  size_t first = count, differing = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) != 0) {
      if (first == count) first = i;
      ++differing;
    }
  }
  if (differing == 0) return "";
  return "element " + std::to_string(first) + " of " + std::to_string(count) + " is " +
         numberText(elementAsNumber(got, first, dtype)) + ", expected " +
         numberText(elementAsNumber(want, first, dtype)) + " (" + std::to_string(differing) +
         " elements differ)";
}

uint8_t patternByte(uint64_t seed, int tag, size_t i) {
  // Hashed, so a block moved by any offset (a segment, a rank's share) no longer matches.
  uint64_t h = mix64(mix64(seed ^ (static_cast<uint64_t>(tag) << 40)) + (i >> 3));
  return static_cast<uint8_t>(h >> ((i & 7) * 8));
}

}  // namespace test
}  // namespace hora
