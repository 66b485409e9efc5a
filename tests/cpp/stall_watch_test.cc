// StallWatch: rank 0 looks for deadlocks on a period, and only while tensors are pending.
#include "core/runtime/stall_watch.h"

#include <gtest/gtest.h>

#include <memory>

namespace hora {
namespace {

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

class RankZero : public ::testing::Test {
 protected:
  RankZero() : sets_(0) {
    sets_.add(0, {0, 1}, nullptr);
    coordinator_ = std::make_unique<Coordinator>(2, sets_, settings_, 1);
  }
  void submit(int rank, const std::string& name) {
    RequestBatch b;
    Request r;
    r.name = name;
    r.rank = rank;
    r.shape = {4};
    b.requests.push_back(r);
    coordinator_->ingest(rank, b);
  }

  Settings settings_;
  ProcessSetTable sets_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(RankZero, NothingPendingNothingToWatch) {
  StallWatch w(settings_);
  EXPECT_EQ(w.untilNextCheck(*coordinator_, kT0), Millis(-1));
}

TEST_F(RankZero, DeadlocksAreLookedForOncePerInterval) {
  StallWatch w(settings_);
  submit(0, "a");
  w.inspectStalls(*coordinator_, sets_, kT0);  // its next look is far off
  EXPECT_TRUE(w.checkDeadlocks(*coordinator_, kT0));
  EXPECT_FALSE(w.checkDeadlocks(*coordinator_, kT0 + Millis(1)));
  EXPECT_EQ(w.untilNextCheck(*coordinator_, kT0 + Millis(50)),
            StallWatch::kDeadlockCheckInterval - Millis(50));
  EXPECT_TRUE(w.checkDeadlocks(*coordinator_, kT0 + StallWatch::kDeadlockCheckInterval));
}

}  // namespace
}  // namespace hora
