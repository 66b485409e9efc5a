#include <gtest/gtest.h>

#include <limits>

#include "core/common/wire.h"

namespace hora {
namespace {

TEST(Wire, RoundTripsEveryFieldType) {
  WireWriter w;
  w.u8(0xab).u16(0xbeef).u32(0xdeadbeef).u64(0x0123456789abcdefull).i32(-7).i64(-1234567890123ll);
  w.f64(-0.15625).boolean(true).str("hora").vec(std::vector<int32_t>{1, -2, 3});
  w.vec(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 0});
  WireReader r(w.data());
  EXPECT_EQ(r.u8(), 0xab);
  EXPECT_EQ(r.u16(), 0xbeef);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), 0x0123456789abcdefull);
  EXPECT_EQ(r.i32(), -7);
  EXPECT_EQ(r.i64(), -1234567890123ll);
  EXPECT_EQ(r.f64(), -0.15625);
  EXPECT_TRUE(r.boolean());
  EXPECT_EQ(r.str(), "hora");
  EXPECT_EQ(r.vec<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(r.vec<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 0}));
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.atEnd());
}

TEST(Wire, BytesAreLittleEndian) {
  WireWriter w;
  w.u32(0x11223344).i32(-2);
  const std::string& d = w.data();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d.substr(0, 4), std::string("\x44\x33\x22\x11", 4));
  EXPECT_EQ(d.substr(4, 4), std::string("\xfe\xff\xff\xff", 4));
}

TEST(Wire, ReadingPastTheEndFailsAndStaysFailed) {
  WireWriter w;
  w.u16(5);
  WireReader r(w.data());
  EXPECT_EQ(r.u32(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.u8(), 0);  // even what would still fit: the stream is out of step
  EXPECT_EQ(r.str(), "");
}

TEST(Wire, HugeCountFailsBeforeAllocating) {
  WireWriter w;
  w.u32(0x7fffffff).u64(1);
  WireReader r(w.data());
  EXPECT_TRUE(r.vec<int64_t>().empty());
  EXPECT_FALSE(r.ok());
  WireReader s(w.data());
  EXPECT_EQ(s.count(8), 0u);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace hora
