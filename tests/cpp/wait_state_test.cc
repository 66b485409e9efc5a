// WaitState: when a frontend wait wakes the loop, and which wait reports a worker sends.
#include "core/runtime/wait_state.h"

#include <gtest/gtest.h>

namespace hora {
namespace {

TEST(WaitState, OnlyTheFirstWaiterWakesTheLoop) {
  WaitState w;
  EXPECT_TRUE(w.begin());
  EXPECT_FALSE(w.begin());
}

TEST(WaitState, AWaitEndingWhileNoBlockedReportIsCurrentWakesNothing) {
  WaitState w;
  w.begin();
  w.cycleStart();
  EXPECT_TRUE(w.waitingNow());
  // Nothing awaited from the coordinator: blocked does not matter, nothing is reported.
  EXPECT_EQ(w.workerReport(/*awaiting=*/false, 0), -1);
  EXPECT_FALSE(w.end());
}

TEST(WaitState, AWaitEndingWhileTheLoopMayCountItBlockedWakesTheLoop) {
  WaitState w;
  w.begin();
  w.cycleStart();  // the loop may count it from now on
  EXPECT_TRUE(w.end());
}

TEST(WaitState, AWorkerReportsBlockedOnceThenAgainAfterEachBatch) {
  WaitState w;
  w.begin();
  w.cycleStart();
  EXPECT_EQ(w.workerReport(true, 0), 1);
  EXPECT_EQ(w.workerReport(true, 0), -1);  // said already
  EXPECT_EQ(w.workerReport(true, 1), 1);   // a batch applied since may have made it stale
  w.end();
  w.cycleStart();
  EXPECT_EQ(w.workerReport(true, 1), 0);  // the wait ended before any batch: say so
  EXPECT_EQ(w.endReports(), 1u);
}

TEST(WaitState, ABatchAfterABlockedReportMakesTheEndNeedNoReport) {
  WaitState w;
  w.begin();
  w.cycleStart();
  EXPECT_EQ(w.workerReport(true, 0), 1);
  w.end();
  w.cycleStart();
  // The batch that completed the wait went out after the report: it is stale at the coordinator.
  EXPECT_EQ(w.workerReport(false, 1), -1);
  EXPECT_EQ(w.endReports(), 0u);
  EXPECT_FALSE(w.begin() && w.end());
}

TEST(WaitState, RequestsCarryTheWaitStateAndCountAsItsReport) {
  WaitState w;
  w.begin();
  w.cycleStart();
  EXPECT_TRUE(w.requestsSent(3));
  EXPECT_EQ(w.workerReport(true, 3), -1);
}

TEST(WaitState, RankZeroReportsBlockedOnlyWhileAwaiting) {
  WaitState w;
  w.begin();
  w.cycleStart();
  EXPECT_FALSE(w.rankZeroReport(false));
  EXPECT_TRUE(w.rankZeroReport(true));
  EXPECT_TRUE(w.end());  // watched: a blocked report is current
}

}  // namespace
}  // namespace hora
