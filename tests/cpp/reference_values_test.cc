// The test references agree with the engine's kernels everywhere, not only on the values the
// collective checks happen to draw: two independent implementations of the same rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/common/reduce.h"
#include "tests/cpp/reference_values.h"

namespace hora {
namespace test {
namespace {

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float floatOf(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

TEST(ReferenceValues, HalfConversionsMatchTheEngineOnEveryValueAndMidpoint) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN payloads may differ
    float wide = referenceHalfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(bitsOf(wide), bitsOf(halfToFloat(static_cast<uint16_t>(h)))) << std::hex << h;
    ASSERT_EQ(referenceFloatToHalf(wide), h) << std::hex << h;
    // Halfway to the next half up, and just either side: ties go to even.
    if ((h & 0x7fff) < 0x7bff) {
      float next = referenceHalfToFloat(static_cast<uint16_t>(h + 1));
      float mid = static_cast<float>((static_cast<double>(wide) + next) / 2);
      for (float f :
           {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f * (h & 0x8000 ? -1 : 1))}) {
        ASSERT_EQ(referenceFloatToHalf(f), floatToHalf(f)) << f;
      }
    }
  }
}

TEST(ReferenceValues, Bfloat16ConversionsMatchTheEngine) {
  std::mt19937 gen(7);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) continue;
    float wide = referenceBfloat16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(bitsOf(wide), bitsOf(bfloat16ToFloat(static_cast<uint16_t>(b))));
    // Every low half-word pattern class: exact, below, at and above the tie.
    for (uint32_t low :
         {0x0000u, 0x7fffu, 0x8000u, 0x8001u, static_cast<uint32_t>(gen() & 0xffff)}) {
      float f = floatOf((b << 16) | low);
      if (std::isnan(f)) continue;
      ASSERT_EQ(referenceFloatToBfloat16(f), floatToBfloat16(f)) << std::hex << ((b << 16) | low);
    }
  }
}

TEST(ReferenceValues, FoldMatchesTheEngineKernelForEveryDtypeAndOp) {
  const DataType dtypes[] = {DataType::UInt8,   DataType::Int8,     DataType::UInt16,
                             DataType::Int16,   DataType::Int32,    DataType::Int64,
                             DataType::Float16, DataType::BFloat16, DataType::Float32,
                             DataType::Float64, DataType::Bool};
  const size_t count = 4099;
  for (DataType dt : dtypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
      for (bool revealing : {false, true}) {
        ValueKind kind;
        kind.orderRevealing = revealing;
        Bytes a = makeValues(11, 0, count, dt, op, kind),
              b = makeValues(11, 1, count, dt, op, kind);
        Bytes engine = a;
        reduceInto(engine.data(), b.data(), count, dt, op);
        referenceFold(a.data(), b.data(), count, dt, op);
        EXPECT_EQ(compareElements(engine.data(), a.data(), count, dt), "")
            << dtypeName(dt) << " " << reduceOpName(op) << (revealing ? " order-revealing" : "");
      }
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace hora
