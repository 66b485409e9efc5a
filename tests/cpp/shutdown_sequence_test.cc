// ShutdownSequence: a requested shutdown starts once and waits a bounded time for its answer.
#include "core/runtime/shutdown_sequence.h"

#include <gtest/gtest.h>

namespace hora {
namespace {

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

TEST(ShutdownSequence, NothingStartsBeforeARequest) {
  ShutdownSequence s;
  EXPECT_FALSE(s.start(kT0));
  Millis wait(-1);
  EXPECT_FALSE(s.expired(kT0 + Millis(60000), &wait));
  EXPECT_EQ(wait, Millis(-1));
}

TEST(ShutdownSequence, ARequestStartsOnce) {
  ShutdownSequence s;
  s.request();
  EXPECT_TRUE(s.start(kT0));
  EXPECT_FALSE(s.start(kT0 + Millis(1)));
}

TEST(ShutdownSequence, TheWaitForTheAcknowledgementIsBounded) {
  ShutdownSequence s;
  s.request();
  s.start(kT0);
  Millis wait(-1);
  EXPECT_FALSE(s.expired(kT0 + Millis(4000), &wait));
  EXPECT_EQ(wait, ShutdownSequence::kAckTimeout - Millis(4000));
  wait = Millis(5);
  EXPECT_FALSE(s.expired(kT0 + Millis(4000), &wait));
  EXPECT_EQ(wait, Millis(5));  // a shorter wait stays
  EXPECT_FALSE(s.stopped());
  EXPECT_TRUE(s.expired(kT0 + ShutdownSequence::kAckTimeout, &wait));
  EXPECT_TRUE(s.stopped());
}

TEST(ShutdownSequence, TheCoordinatorsReasonIsInTheMessage) {
  ShutdownSequence s;
  s.stop("rank 2 hit a stall");
  EXPECT_TRUE(s.stopped());
  std::string m = s.cleanStopMessage();
  EXPECT_NE(m.find("Hora has been shut down"), std::string::npos);
  EXPECT_NE(m.find("(rank 2 hit a stall)"), std::string::npos);
  ShutdownSequence plain;
  plain.stop();
  EXPECT_EQ(plain.cleanStopMessage().find('('), std::string::npos);
}

}  // namespace
}  // namespace hora
