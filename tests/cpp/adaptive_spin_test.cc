// The adaptive spin budget's state machine (core/common/adaptive_spin.h) and Handle::wait's use
// of it. Behaviour only: which budget each wait gets, never how long anything takes.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "core/common/adaptive_spin.h"
#include "core/coordinator/handle.h"

namespace hora {
namespace {

constexpr Micros kFull{50};

void miss(AdaptiveSpin& s, int n) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(s.budget(), kFull);
    s.record(false);
  }
}

TEST(AdaptiveSpin, SpinsTheFullBudgetWhileWaitsEndWithinIt) {
  AdaptiveSpin s(kFull);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(s.budget(), kFull);
    s.record(true);
  }
  EXPECT_TRUE(s.spinning());
}

TEST(AdaptiveSpin, StopsAfterConsecutiveMissesOnly) {
  AdaptiveSpin s(kFull);
  miss(s, AdaptiveSpin::kMissesToStop - 1);
  s.record(true);  // a hit in between starts the count again
  miss(s, AdaptiveSpin::kMissesToStop - 1);
  EXPECT_TRUE(s.spinning());
  EXPECT_EQ(s.budget(), kFull);
  s.record(false);
  EXPECT_FALSE(s.spinning());
  EXPECT_EQ(s.budget(), Micros(0));
}

TEST(AdaptiveSpin, ProbesEveryNthWaitWhileStopped) {
  AdaptiveSpin s(kFull);
  miss(s, AdaptiveSpin::kMissesToStop);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < AdaptiveSpin::kProbeEvery - 1; ++i) EXPECT_EQ(s.budget(), Micros(0));
    EXPECT_EQ(s.budget(), kFull) << "round " << round;  // the probe
    s.record(false);                                    // it missed: stay stopped
    EXPECT_FALSE(s.spinning());
  }
}

TEST(AdaptiveSpin, AProbeThatHitsRestoresSpinning) {
  AdaptiveSpin s(kFull);
  miss(s, AdaptiveSpin::kMissesToStop);
  for (int i = 0; i < AdaptiveSpin::kProbeEvery - 1; ++i) EXPECT_EQ(s.budget(), Micros(0));
  EXPECT_EQ(s.budget(), kFull);
  s.record(true);
  EXPECT_TRUE(s.spinning());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.budget(), kFull);
}

TEST(AdaptiveSpin, ZeroBudgetNeverSpins) {
  AdaptiveSpin s(Micros(0));
  for (int i = 0; i < 2 * AdaptiveSpin::kProbeEvery; ++i) EXPECT_EQ(s.budget(), Micros(0));
}

// Handle::wait informs the shared budget: waits that sleep past it stop the spinning of later
// handles; a handle already complete records nothing.
TEST(AdaptiveSpin, HandleWaitsTeachTheSharedBudget) {
  auto spin = std::make_shared<AdaptiveSpin>(Micros(1000));
  {
    Handle done(spin);
    done.complete(nullptr);
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(done.wait(std::nullopt));
    EXPECT_TRUE(spin->spinning());
  }
  for (int i = 0; i < AdaptiveSpin::kMissesToStop; ++i) {
    Handle h(spin);
    EXPECT_FALSE(h.wait(Millis(5)));  // spins its 1 ms, then times out on the cv: a miss
    h.complete(nullptr);
  }
  EXPECT_FALSE(spin->spinning());
  Handle late(spin);
  std::thread completer([&] { late.complete(nullptr); });
  EXPECT_TRUE(late.wait(std::nullopt));  // correct without the spin too
  completer.join();
}

}  // namespace
}  // namespace hora
