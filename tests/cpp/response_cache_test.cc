#include <gtest/gtest.h>

#include "core/coordinator/response_cache.h"

namespace hora {
namespace {

Request req(std::vector<int64_t> shape) {
  Request r;
  r.shape = std::move(shape);
  return r;
}

TEST(ResponseCache, LookupNeedsSameParams) {
  ResponseCache c(4);
  c.put(2, "0:a", req({3}), Response());
  EXPECT_EQ(c.slotOf("0:a"), 2);
  EXPECT_EQ(c.lookup("0:a", req({3})), 2);
  EXPECT_EQ(c.lookup("0:a", req({4})), -1);
  EXPECT_EQ(c.lookup("0:b", req({3})), -1);
}

TEST(ResponseCache, EvictFreesSlotAndKey) {
  ResponseCache c(2);
  c.put(0, "k", req({1}), Response());
  c.evict(0);
  EXPECT_FALSE(c.occupied(0));
  EXPECT_EQ(c.slotOf("k"), -1);
  c.evict(0);  // idempotent
}

TEST(ResponseCache, ChoosesFreeSlotThenLeastRecentlyUsedEvictable) {
  ResponseCache c(3);
  auto any = [](int) { return true; };
  for (int i = 0; i < 3; ++i) {
    int s = c.chooseSlot(any);
    EXPECT_EQ(s, i);
    c.put(s, "k" + std::to_string(i), req({1}), Response());
  }
  c.touch(0);  // now 1 is the least recently used
  EXPECT_EQ(c.chooseSlot(any), 1);
  EXPECT_EQ(c.chooseSlot([](int s) { return s != 1; }), 2);
  EXPECT_EQ(c.chooseSlot([](int) { return false; }), -1);
}

TEST(ResponseCache, PutMovesAKeyToItsNewSlot) {
  ResponseCache c(3);
  c.put(0, "k", req({1}), Response());
  c.put(2, "k", req({2}), Response());
  EXPECT_FALSE(c.occupied(0));
  EXPECT_EQ(c.slotOf("k"), 2);
}

TEST(ResponseCache, PutAgainInTheSameSlotReplacesAndRefreshes) {
  ResponseCache c(2);
  auto any = [](int) { return true; };
  c.put(0, "a", req({1}), Response());
  c.put(1, "b", req({1}), Response());
  Response longer;
  longer.names = {"a"};
  longer.elementCounts = {7};
  c.put(0, "a", req({7}), longer);  // renegotiated with another shape, same slot
  EXPECT_EQ(c.slotOf("a"), 0);
  EXPECT_EQ(c.lookup("a", req({1})), -1);
  EXPECT_EQ(c.lookup("a", req({7})), 0);
  EXPECT_EQ(c.response(0).elementCounts, std::vector<int64_t>{7});
  EXPECT_EQ(c.chooseSlot(any), 1);  // "a" is now the most recently used
  c.evict(0);
  EXPECT_EQ(c.slotOf("a"), -1);
  EXPECT_EQ(c.chooseSlot(any), 0);
}

TEST(ResponseCache, DisabledWithZeroCapacity) {
  ResponseCache c(0);
  EXPECT_FALSE(c.enabled());
  EXPECT_EQ(c.chooseSlot([](int) { return true; }), -1);
}

}  // namespace
}  // namespace hora
