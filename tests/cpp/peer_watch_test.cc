// PeerWatch: when the loop looks for silent peers, and the error that names one.
#include "core/runtime/peer_watch.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/common/errors.h"

namespace hora {
namespace {

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

TEST(PeerWatch, WithNothingWatchedItLooksEveryCycle) {
  PeerWatch w(1, 2, Millis(4000));
  int asked = 0;
  auto none = [&] {
    ++asked;
    return std::vector<int>{};
  };
  w.check(kT0, none);
  w.check(kT0 + Millis(1), none);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(w.untilNextCheck(kT0), Millis(-1));
}

TEST(PeerWatch, WhileWatchingItLooksOnlyEveryInterval) {
  PeerWatch w(1, 2, Millis(4000));
  int asked = 0;
  auto coordinator = [&] {
    ++asked;
    return std::vector<int>{0};
  };
  w.check(kT0, coordinator);
  w.check(kT0 + Millis(5), coordinator);
  EXPECT_EQ(asked, 1);
  w.check(kT0 + PeerWatch::kCheckInterval, coordinator);
  EXPECT_EQ(asked, 2);
}

TEST(PeerWatch, ThePollLastsUntilTheFirstPingIsDue) {
  PeerWatch w(1, 2, Millis(4000));
  w.check(kT0, [] { return std::vector<int>{0}; });
  EXPECT_EQ(w.untilNextCheck(kT0), Millis(1000));
  EXPECT_EQ(w.untilNextCheck(kT0 + Millis(400)), Millis(600));
}

TEST(PeerWatch, ASilentPeerIsPingedThenNamedInATimeout) {
  PeerWatch w(1, 2, Millis(4000));
  auto coordinator = [] { return std::vector<int>{0}; };
  EXPECT_TRUE(w.check(kT0, coordinator).empty());
  EXPECT_EQ(w.check(kT0 + Millis(1000), coordinator), std::vector<int>{0});
  try {
    w.check(kT0 + Millis(4000), coordinator);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 1: rank 0 (the coordinator) is unresponsive"), std::string::npos) << m;
    EXPECT_NE(m.find("4000 ms while this rank waits"), std::string::npos) << m;
  }
}

TEST(PeerWatch, RankZeroNamesTheSilentWorker) {
  PeerWatch w(0, 3, Millis(4000));
  auto workers = [] { return std::vector<int>{2}; };
  w.check(kT0, workers);
  w.paused(Millis(1000));  // busy in a collective: no one's silence
  EXPECT_NO_THROW(w.check(kT0 + Millis(4000), workers));
  try {
    w.check(kT0 + Millis(5000), workers);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: rank 2 is unresponsive"), std::string::npos);
  }
}

// In a control tree the silent rank may be a relay between the two: the message names those.
TEST(PeerWatch, TheRanksThatRelayAreNamedBesideTheSilentOne) {
  PeerWatch w(0, 7, Millis(4000), [](int peer) { return peer == 3 ? "1" : ""; });
  auto workers = [] { return std::vector<int>{3}; };
  w.check(kT0, workers);
  try {
    w.check(kT0 + Millis(5000), workers);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0: rank 3 is unresponsive"), std::string::npos) << m;
    EXPECT_NE(m.find("messages pass through rank(s) 1,"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hora
