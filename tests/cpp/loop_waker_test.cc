// LoopWaker: one wake-up per cycle at most, none once the loop released its channel, a parked
// loop woken by the next one, and every wake-up asked counted.
#include "core/runtime/loop_waker.h"

#include <gtest/gtest.h>

#include <thread>

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
  // Three asked, the second coalesced with the first: the count does not depend on the timing.
  EXPECT_EQ(w.asked(), 3u);
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

TEST(LoopWaker, AParkedLoopWakesOnAWakeUpOrItsTimeout) {
  RecordingChannel channel(0, 1);
  LoopWaker w;
  w.open(&channel);
  w.cycleStart();
  // Nothing asked for: the park lasts its timeout.
  auto begin = Clock::now();
  w.park(Millis(30));
  EXPECT_GE(Clock::now() - begin, Millis(30));
  // A wake-up from another thread ends a park that would otherwise outlast the test's bound.
  std::thread waker([&] {
    std::this_thread::sleep_for(Millis(20));
    w.wake();
  });
  begin = Clock::now();
  w.park(Millis(5000));
  EXPECT_LT(Clock::now() - begin, Millis(2500));
  waker.join();
  // One still pending since the last cycle start ends the next park at once.
  begin = Clock::now();
  w.park(Millis(5000));
  EXPECT_LT(Clock::now() - begin, Millis(2500));
  EXPECT_EQ(channel.wakeups, 1);  // the channel heard of it too, once
}

}  // namespace
}  // namespace hora
