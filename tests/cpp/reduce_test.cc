// Reduction kernels against scalar references for every dtype and op, and the float16 / bfloat16
// conversions against references built from the definition of the formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"

namespace hora {
namespace {

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
const size_t kCounts[] = {0, 1, 7, 255, 256, 257, 1001};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Value of a float16 from its fields: sign, 5-bit exponent (bias 15), 10-bit mantissa.
double halfValue(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

// ---- integer and floating references -------------------------------------------------------

template <typename T>
T refApply(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
    switch (op) {
      case ReduceOp::Sum: return static_cast<T>(static_cast<U>(x + y));
      case ReduceOp::Product: return static_cast<T>(static_cast<U>(x * y));
      case ReduceOp::Min: return std::min(a, b);
      case ReduceOp::Max: return std::max(a, b);
      default: break;
    }
  } else {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    switch (op) {
      case ReduceOp::Sum: return a + b;
      case ReduceOp::Product: return a * b;
      case ReduceOp::Min: return (std::isnan(a) || std::isnan(b)) ? nan : std::min(a, b);
      case ReduceOp::Max: return (std::isnan(a) || std::isnan(b)) ? nan : std::max(a, b);
      default: break;
    }
  }
  return T();
}

template <typename T>
std::vector<T> randomValues(size_t n, std::mt19937& rng) {
  std::vector<T> v(n);
  if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<int64_t> d(std::numeric_limits<T>::min(),
                                             std::numeric_limits<T>::max());
    for (auto& x : v) x = static_cast<T>(d(rng));
  } else {
    std::uniform_real_distribution<double> d(-100, 100);
    for (auto& x : v) x = static_cast<T>(d(rng));
  }
  return v;
}

template <typename T>
bool sameValue(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return a == b;
}

template <typename T>
void checkNative(DataType dtype) {
  std::mt19937 rng(1234);
  for (ReduceOp op : kOps) {
    for (size_t n : kCounts) {
      auto dst = randomValues<T>(n, rng), src = randomValues<T>(n, rng);
      if constexpr (std::is_floating_point_v<T>) {
        if (n > 3) {  // NaN propagates from either side
          dst[1] = std::numeric_limits<T>::quiet_NaN();
          src[2] = std::numeric_limits<T>::quiet_NaN();
        }
      }
      auto expect = dst;
      for (size_t i = 0; i < n; ++i) expect[i] = refApply(op, dst[i], src[i]);
      reduceInto(dst.data(), src.data(), n, dtype, op);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(sameValue(dst[i], expect[i]))
            << dtypeName(dtype) << " " << reduceOpName(op) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Reduce, IntegerTypesWrapLikeNumpy) {
  checkNative<uint8_t>(DataType::UInt8);
  checkNative<int8_t>(DataType::Int8);
  checkNative<uint16_t>(DataType::UInt16);
  checkNative<int16_t>(DataType::Int16);
  checkNative<int32_t>(DataType::Int32);
  checkNative<int64_t>(DataType::Int64);
  int32_t a = std::numeric_limits<int32_t>::max(), b = 1;
  reduceInto(&a, &b, 1, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(a, std::numeric_limits<int32_t>::min());
  uint16_t c = 65535, d = 65535;
  reduceInto(&c, &d, 1, DataType::UInt16, ReduceOp::Product);
  EXPECT_EQ(c, 1);
}

TEST(Reduce, FloatingTypes) {
  checkNative<float>(DataType::Float32);
  checkNative<double>(DataType::Float64);
}

TEST(Reduce, BoolIsLogical) {
  std::vector<uint8_t> a = {0, 0, 1, 1, 0, 2}, b = {0, 1, 0, 1, 3, 0};
  struct Case {
    ReduceOp op;
    std::vector<uint8_t> expect;
  } cases[] = {{ReduceOp::Sum, {0, 1, 1, 1, 1, 1}},
               {ReduceOp::Max, {0, 1, 1, 1, 1, 1}},
               {ReduceOp::Product, {0, 0, 0, 1, 0, 0}},
               {ReduceOp::Min, {0, 0, 0, 1, 0, 0}}};
  for (const auto& c : cases) {
    auto d = a;
    reduceInto(d.data(), b.data(), d.size(), DataType::Bool, c.op);
    EXPECT_EQ(d, c.expect) << reduceOpName(c.op);
  }
}

TEST(Reduce, NarrowFloatsWidenReduceAndRound) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-300, 300);
  for (DataType dt : {DataType::Float16, DataType::BFloat16}) {
    auto narrow = dt == DataType::Float16 ? floatToHalf : floatToBfloat16;
    auto widen = dt == DataType::Float16 ? halfToFloat : bfloat16ToFloat;
    for (ReduceOp op : kOps) {
      for (size_t n : kCounts) {
        std::vector<uint16_t> dst(n), src(n);
        for (size_t i = 0; i < n; ++i) {
          dst[i] = narrow(dist(rng));
          src[i] = narrow(dist(rng));
        }
        if (n > 3) src[3] = narrow(std::nanf(""));
        std::vector<uint16_t> expect(n);
        for (size_t i = 0; i < n; ++i)
          expect[i] = narrow(refApply(op, widen(dst[i]), widen(src[i])));
        reduceInto(dst.data(), src.data(), n, dt, op);
        for (size_t i = 0; i < n; ++i) {
          bool bothNan = std::isnan(widen(dst[i])) && std::isnan(widen(expect[i]));
          ASSERT_TRUE(bothNan || dst[i] == expect[i])
              << dtypeName(dt) << " " << reduceOpName(op) << " n=" << n << " i=" << i << " got "
              << dst[i] << " want " << expect[i];
        }
      }
    }
  }
  // 2048 + 1 is not a float16: the sum rounds to even (2048), and 2048 + 3 rounds up to 2052.
  uint16_t a[2] = {floatToHalf(2048), floatToHalf(2048)}, b[2] = {floatToHalf(1), floatToHalf(3)};
  reduceInto(a, b, 2, DataType::Float16, ReduceOp::Sum);
  EXPECT_EQ(halfToFloat(a[0]), 2048.0f);
  EXPECT_EQ(halfToFloat(a[1]), 2052.0f);
  // Overflow to infinity in float16.
  uint16_t big = floatToHalf(60000), big2 = floatToHalf(60000);
  reduceInto(&big, &big2, 1, DataType::Float16, ReduceOp::Sum);
  EXPECT_EQ(big, 0x7c00);
}

TEST(Reduce, AverageAndAdasumAreNotKernels) {
  float a = 1, b = 2;
  EXPECT_THROW(reduceInto(&a, &b, 1, DataType::Float32, ReduceOp::Average), InternalError);
  EXPECT_THROW(reduceInto(&a, &b, 1, DataType::Float32, ReduceOp::Adasum), InternalError);
}

// ---- conversions -------------------------------------------------------------------------

TEST(Half, WidenEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    int exp = (h >> 10) & 31;
    if (exp == 31) {
      if ((h & 1023) == 0) {
        ASSERT_TRUE(std::isinf(f) && std::signbit(f) == bool(h >> 15)) << h;
      } else {
        ASSERT_TRUE(std::isnan(f)) << h;
      }
      continue;
    }
    ASSERT_EQ(double(f), halfValue(static_cast<uint16_t>(h))) << h;
    ASSERT_EQ(std::signbit(f), bool(h >> 15)) << h;
  }
}

// Nearest float16 by search over all finite values, ties to the even mantissa.
uint16_t referenceHalf(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;  // halfway between 65504 and 2^16 rounds to even: inf
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // largest half value <= a
    uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (halfValue(mid) <= a) lo = mid;
    else hi = static_cast<uint16_t>(mid - 1);
  }
  if (lo == 0x7bff) return sign | lo;
  double below = halfValue(lo), above = halfValue(static_cast<uint16_t>(lo + 1));
  uint16_t pick;
  if (a - below < above - a) pick = lo;
  else if (a - below > above - a) pick = static_cast<uint16_t>(lo + 1);
  else pick = (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;
  return sign | pick;
}

TEST(Half, NarrowRoundsToNearestEven) {
  // Every finite half, the midpoints between neighbours, and one float ulp either side of them.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    float exact = static_cast<float>(halfValue(static_cast<uint16_t>(h)));
    ASSERT_EQ(floatToHalf(exact), h);
    ASSERT_EQ(floatToHalf(-exact), h | 0x8000);
    double next = halfValue(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((halfValue(static_cast<uint16_t>(h)) + next) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      ASSERT_EQ(floatToHalf(f), referenceHalf(f)) << "f=" << f;
      ASSERT_EQ(floatToHalf(-f), referenceHalf(-f)) << "f=" << -f;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    float f = floatOf(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    ASSERT_EQ(floatToHalf(f), referenceHalf(f)) << "bits " << bitsOf(f);
  }
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie: rounds to even (zero)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even (2)
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
}

uint16_t referenceBfloat16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t x = bitsOf(f);
  uint32_t lo = x & 0xffff0000u;
  int exp = (lo >> 23) & 255;
  double loV = std::fabs(double(floatOf(lo)));
  double ulp = std::ldexp(1.0, (exp == 0 ? 1 : exp) - 127 - 7);
  double a = std::fabs(double(f));
  double d0 = a - loV, d1 = loV + ulp - a;
  bool up = d1 < d0 || (d1 == d0 && ((lo >> 16) & 1));
  return static_cast<uint16_t>((lo >> 16) + (up ? 1 : 0));
}

TEST(Bfloat16, ConversionsRoundToNearestEven) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(bitsOf(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToBfloat16(f), b);
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 500000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties
    float f = floatOf(bits);
    if (std::isnan(f)) {
      uint16_t b = floatToBfloat16(f);
      ASSERT_TRUE(std::isnan(bfloat16ToFloat(b))) << bits;
      continue;
    }
    if (std::isinf(f)) continue;
    ASSERT_EQ(floatToBfloat16(f), referenceBfloat16(f)) << "bits " << bits;
  }
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past the max
  EXPECT_EQ(floatToBfloat16(floatOf(0x7f7f7fffu)), 0x7f7f);
  // A signalling NaN whose payload sits in the low half stays a NaN.
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(floatOf(0x7f800001u)))));
}

// ---- scaling -----------------------------------------------------------------------------

TEST(Scale, FloatsIntegersAndBool) {
  std::vector<float> f = {1, -2, 3.5f};
  scaleInPlace(f.data(), f.size(), DataType::Float32, 0.5);
  EXPECT_EQ(f, (std::vector<float>{0.5f, -1, 1.75f}));
  std::vector<double> d = {3, 6};
  scaleInPlace(d.data(), d.size(), DataType::Float64, 1.0 / 3);
  EXPECT_DOUBLE_EQ(d[0], 1.0);
  EXPECT_DOUBLE_EQ(d[1], 2.0);
  std::vector<int32_t> i = {7, -7, 9, 0};
  scaleInPlace(i.data(), i.size(), DataType::Int32, 1.0 / 3);
  EXPECT_EQ(i, (std::vector<int32_t>{2, -2, 3, 0}));  // truncation toward zero
  std::vector<int64_t> l = {int64_t(1) << 40, -5};
  scaleInPlace(l.data(), l.size(), DataType::Int64, 0.25);
  EXPECT_EQ(l, (std::vector<int64_t>{int64_t(1) << 38, -1}));
  std::vector<uint8_t> u = {200, 10};
  scaleInPlace(u.data(), u.size(), DataType::UInt8, 2.0);
  EXPECT_EQ(u, (std::vector<uint8_t>{255, 20}));  // saturates instead of wrapping
  std::vector<uint16_t> h = {floatToHalf(3), floatToHalf(-1)};
  scaleInPlace(h.data(), h.size(), DataType::Float16, 0.5);
  EXPECT_EQ(halfToFloat(h[0]), 1.5f);
  EXPECT_EQ(halfToFloat(h[1]), -0.5f);
  std::vector<uint16_t> bf(1000, floatToBfloat16(4));
  scaleInPlace(bf.data(), bf.size(), DataType::BFloat16, 0.25);
  for (uint16_t x : bf) ASSERT_EQ(bfloat16ToFloat(x), 1.0f);
  std::vector<uint8_t> b = {1, 0, 1};
  scaleInPlace(b.data(), b.size(), DataType::Bool, 0.5);
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 0, 1}));
  scaleInPlace(b.data(), b.size(), DataType::Bool, 0.0);
  EXPECT_EQ(b, (std::vector<uint8_t>{0, 0, 0}));
  scaleInPlace(nullptr, 0, DataType::Float32, 2.0);
}

// Horovod rounds the factor to float and multiplies in float; a product in double rounded once
// to float gives 0.9f instead.
TEST(Scale, Float32MultipliesInFloat) {
  std::vector<float> f = {9.0f};
  scaleInPlace(f.data(), f.size(), DataType::Float32, 0.1);
  EXPECT_EQ(f[0], 0.1f * 9.0f);
  EXPECT_NE(f[0], float(0.1 * 9.0));
}

TEST(Scale, NarrowIntegersAverageThroughInt32) {
  EXPECT_TRUE(averagesInInt32(DataType::Int8));
  EXPECT_TRUE(averagesInInt32(DataType::UInt16));
  EXPECT_FALSE(averagesInInt32(DataType::Int32));
  EXPECT_FALSE(averagesInInt32(DataType::Float16));
  std::vector<int8_t> in = {100, -100, -7, 127};
  std::vector<int32_t> wide(in.size());
  widenToInt32(in.data(), wide.data(), in.size(), DataType::Int8);
  EXPECT_EQ(wide, (std::vector<int32_t>{100, -100, -7, 127}));
  for (int32_t& w : wide) w *= 3;  // the sum of three ranks, beyond int8
  std::vector<int8_t> out(in.size());
  narrowScaledFromInt32(wide.data(), out.data(), out.size(), DataType::Int8, 1.0 / 3);
  EXPECT_EQ(out, (std::vector<int8_t>{100, -100, -7, 127}));
  std::vector<int32_t> odd = {-7, 7, 1000};
  std::vector<uint8_t> u(odd.size());
  narrowScaledFromInt32(odd.data(), u.data(), u.size(), DataType::UInt8, 1.0 / 3);
  EXPECT_EQ(u, (std::vector<uint8_t>{0, 2, 255}));  // truncation toward zero, saturation
  std::vector<int16_t> s(1);
  narrowScaledFromInt32(odd.data(), s.data(), 1, DataType::Int16, 1.0 / 3);
  EXPECT_EQ(s[0], -2);
}

TEST(Scale, DivideIsExactOrCorrectlyRounded) {
  std::vector<float> f = {7.0f, -1.0f};
  divideInPlace(f.data(), f.size(), DataType::Float32, 3);
  EXPECT_EQ(f, (std::vector<float>{7.0f / 3.0f, -1.0f / 3.0f}));
  std::vector<int64_t> l = {(int64_t(1) << 60) * 3 / 4 * 4 - 1, -7, 9};
  const int64_t big = l[0];
  divideInPlace(l.data(), l.size(), DataType::Int64, 3);
  EXPECT_EQ(l, (std::vector<int64_t>{big / 3, -2, 3}));  // exact, truncating toward zero
  std::vector<uint16_t> h = {floatToHalf(7)};
  divideInPlace(h.data(), h.size(), DataType::Float16, 3);
  EXPECT_EQ(h[0], floatToHalf(7.0f / 3.0f));
  std::vector<int32_t> wide = {-383, 383, 765};
  std::vector<int8_t> out(wide.size());
  narrowDividedFromInt32(wide.data(), out.data(), out.size(), DataType::Int8, 3);
  EXPECT_EQ(out, (std::vector<int8_t>{-127, 127, 127}));  // -127.67 -> -127; 255 saturates
}

}  // namespace
}  // namespace hora
