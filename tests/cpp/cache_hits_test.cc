#include "core/coordinator/cache_hits.h"

#include <gtest/gtest.h>

namespace hora {
namespace {

TEST(CacheHits, CountsEachRankOncePerSlotAcrossWords) {
  CacheHits hits(4, 130);  // 130 ranks: three words per slot
  EXPECT_TRUE(hits.add(2, 0));
  EXPECT_TRUE(hits.add(2, 64));
  EXPECT_TRUE(hits.add(2, 129));
  EXPECT_FALSE(hits.add(2, 64)) << "a second report of the same rank counted again";
  EXPECT_EQ(hits.count(2), 3);
  EXPECT_EQ(hits.count(1), 0);
  EXPECT_EQ(hits.count(3), 0) << "a report leaked into the next slot's row";
  EXPECT_TRUE(hits.has(2, 129));
  EXPECT_FALSE(hits.has(2, 128));
  EXPECT_FALSE(hits.has(3, 1));
  EXPECT_EQ(hits.ranks(2), (std::vector<int>{0, 64, 129}));
}

TEST(CacheHits, ClearForgetsOnlyThatSlot) {
  CacheHits hits(2, 70);
  for (int r = 0; r < 70; ++r) {
    hits.add(0, r);
    hits.add(1, r);
  }
  hits.clear(0);
  EXPECT_EQ(hits.count(0), 0);
  EXPECT_TRUE(hits.ranks(0).empty());
  EXPECT_EQ(hits.count(1), 70);
  EXPECT_TRUE(hits.add(0, 69)) << "a cleared slot refused a new report";
  EXPECT_EQ(hits.count(0), 1);
}

}  // namespace
}  // namespace hora
