// Liveness: which watched control-channel peers get a ping, and which count as silent.
#include "core/coordinator/liveness.h"

#include <gtest/gtest.h>

#include <vector>

namespace hora {
namespace {

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

TEST(Liveness, NothingWatchedNothingDue) {
  Liveness l(3, Millis(4000));
  EXPECT_EQ(l.interval(), Millis(1000));
  auto v = l.check({}, kT0);
  EXPECT_TRUE(v.ping.empty());
  EXPECT_EQ(v.silent, -1);
  EXPECT_EQ(l.untilNextCheck(kT0), Millis(-1));
}

TEST(Liveness, ASilentWatchedRankIsPingedThenReported) {
  Liveness l(2, Millis(4000));
  // Rank 1 waits for rank 0: watching starts with a clean slate.
  EXPECT_TRUE(l.check({0}, kT0).ping.empty());
  EXPECT_EQ(l.untilNextCheck(kT0), Millis(1000));
  EXPECT_TRUE(l.check({0}, kT0 + Millis(999)).ping.empty());
  auto v = l.check({0}, kT0 + Millis(1000));
  EXPECT_EQ(v.ping, std::vector<int>{0});
  EXPECT_EQ(v.silent, -1);
  // One ping per interval, not one per cycle.
  EXPECT_TRUE(l.check({0}, kT0 + Millis(1500)).ping.empty());
  EXPECT_EQ(l.check({0}, kT0 + Millis(2000)).ping, std::vector<int>{0});
  v = l.check({0}, kT0 + Millis(4000));
  EXPECT_EQ(v.silent, 0);
  EXPECT_EQ(v.silentFor, Millis(4000));
}

TEST(Liveness, AnyMessageRestartsTheSilence) {
  Liveness l(2, Millis(4000));
  l.check({0}, kT0);
  l.heard(0, kT0 + Millis(3000));
  auto v = l.check({0}, kT0 + Millis(5000));
  EXPECT_EQ(v.silent, -1);
  EXPECT_EQ(v.ping, std::vector<int>{0});
  EXPECT_EQ(l.check({0}, kT0 + Millis(7000)).silent, 0);
}

TEST(Liveness, SilenceBeforeWatchingDoesNotCount) {
  Liveness l(3, Millis(4000));
  l.heard(2, kT0);
  // Rank 2 was idle for a minute; rank 0 starts waiting for it only now.
  auto v = l.check({2}, kT0 + Millis(60000));
  EXPECT_TRUE(v.ping.empty());
  EXPECT_EQ(v.silent, -1);
  // Unwatched again, then watched again: a fresh start once more.
  l.check({}, kT0 + Millis(61000));
  EXPECT_EQ(l.check({2}, kT0 + Millis(90000)).silent, -1);
  EXPECT_EQ(l.check({2}, kT0 + Millis(94000)).silent, 2);
}

TEST(Liveness, TimeThisRankSpentBusyDoesNotCount) {
  Liveness l(2, Millis(4000));
  l.check({1}, kT0);
  // Rank 0 ran a collective for 10 s and read no control message meanwhile.
  l.paused(Millis(10000));
  auto v = l.check({1}, kT0 + Millis(10500));
  EXPECT_EQ(v.silent, -1);
  EXPECT_TRUE(v.ping.empty());
  EXPECT_EQ(l.check({1}, kT0 + Millis(14000)).silent, 1);
}

TEST(Liveness, ReportsTheFirstSilentRankAndPingsTheOthers) {
  Liveness l(4, Millis(4000));
  l.check({1, 2, 3}, kT0);
  l.heard(3, kT0 + Millis(3500));
  auto v = l.check({3, 2, 1}, kT0 + Millis(4000));
  EXPECT_EQ(v.silent, 1);
  EXPECT_TRUE(v.ping.empty());  // rank 3 spoke 0.5 s ago: no ping yet
  EXPECT_EQ(l.check({1, 2, 3}, kT0 + Millis(4600)).ping, std::vector<int>{3});
}

TEST(Liveness, OutOfRangeRanksAreIgnored) {
  Liveness l(2, Millis(4000));
  l.heard(7, kT0);
  l.heard(-1, kT0);
  auto v = l.check({-1, 5}, kT0 + Millis(9000));
  EXPECT_TRUE(v.ping.empty());
  EXPECT_EQ(v.silent, -1);
}

}  // namespace
}  // namespace hora
