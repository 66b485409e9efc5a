// LoopWaker: one wake-up per cycle at most, and none once the loop released its channel.
#include "core/runtime/loop_waker.h"

#include <gtest/gtest.h>

#include "tests/cpp/runtime_parts_fakes.h"

namespace hora {
namespace {

TEST(LoopWaker, NothingIsWokenBeforeTheLoopRuns) {
  RecordingChannel channel(0, 1);
  LoopWaker w;
  w.wake();
  EXPECT_FALSE(w.running());
  EXPECT_EQ(channel.wakeups, 0);
}

TEST(LoopWaker, OneWakeUpPerCycleAtMost) {
  RecordingChannel channel(0, 1);
  LoopWaker w;
  w.open(&channel);
  EXPECT_TRUE(w.running());
  w.wake();
  w.wake();  // the cycle the first asked for reads what this one published
  EXPECT_EQ(channel.wakeups, 1);
  w.cycleStart();
  w.wake();
  EXPECT_EQ(channel.wakeups, 2);
  EXPECT_EQ(w.wakeups(), 2u);
}

TEST(LoopWaker, AClosedLoopIsNeverWokenAndItsReleaseRuns) {
  RecordingChannel channel(0, 1);
  LoopWaker w;
  w.open(&channel);
  bool released = false;
  w.close([&] { released = true; });
  EXPECT_TRUE(released);
  EXPECT_FALSE(w.running());
  w.cycleStart();
  w.wake();
  EXPECT_EQ(channel.wakeups, 0);
}

}  // namespace
}  // namespace hora
