// findDeadlockedRanks: which blocked ranks no future submission can release.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/coordinator/coordinator.h"
#include "core/coordinator/deadlock.h"
#include "core/coordinator/tensor_queue.h"

namespace hora {
namespace {

std::vector<bool> blockedRanks(std::vector<int> ranks, int size) {
  std::vector<bool> b(static_cast<size_t>(size), false);
  for (int r : ranks) b[r] = true;
  return b;
}

TEST(Deadlock, TwoRanksInDifferentCollectives) {
  // Rank 0 in barrier, rank 1 in reducescatter (or allreduce 'a' against allreduce 'b').
  std::vector<PendingView> pending = {{{0}, {1}}, {{1}, {0}}};
  EXPECT_EQ(findDeadlockedRanks(pending, blockedRanks({0, 1}, 2)), (std::vector<int>{0, 1}));
}

TEST(Deadlock, ARankThatIsNotBlockedMayStillSubmit) {
  // Rank 1 checkpoints while rank 0 waits in an allreduce: a long wait, not a deadlock.
  std::vector<PendingView> pending = {{{0}, {1}}};
  EXPECT_TRUE(findDeadlockedRanks(pending, blockedRanks({0}, 2)).empty());
  // Both wait in different collectives but rank 1 is not (yet) known to be blocked.
  std::vector<PendingView> crossed = {{{0}, {1}}, {{1}, {0}}};
  EXPECT_TRUE(findDeadlockedRanks(crossed, blockedRanks({0}, 2)).empty());
}

TEST(Deadlock, NothingPendingIsNoDeadlock) {
  EXPECT_TRUE(findDeadlockedRanks({}, blockedRanks({0, 1, 2}, 3)).empty());
  // A blocked rank that holds no pending tensor waits for something else: it counts as free.
  std::vector<PendingView> pending = {{{0}, {1}}};
  EXPECT_TRUE(findDeadlockedRanks(pending, blockedRanks({0, 1}, 2)).empty());
}

TEST(Deadlock, ATensorThatCanRunReleasesItsSubmitters) {
  // Ranks 0 and 1 both asked for 'x' (ready, about to run); rank 2 is blocked on 'y' that needs
  // rank 0, which is released when 'x' runs.
  std::vector<PendingView> pending = {{{0, 1}, {}}, {{2}, {0}}};
  EXPECT_TRUE(findDeadlockedRanks(pending, blockedRanks({0, 1, 2}, 3)).empty());
}

TEST(Deadlock, ReleaseChainsThroughFreeRanks) {
  // Rank 3 computes. Rank 0 waits on 'a' missing 3; rank 1 waits on 'b' missing 0; rank 2 waits
  // on 'c' missing 1. Rank 3 may submit 'a', which frees 0, then 1, then 2.
  std::vector<PendingView> pending = {{{0}, {3}}, {{1}, {0}}, {{2}, {1}}};
  EXPECT_TRUE(findDeadlockedRanks(pending, blockedRanks({0, 1, 2}, 4)).empty());
  // Once rank 3 blocks too (on 'd', missing 2), the cycle closes.
  pending.push_back({{3}, {2}});
  EXPECT_EQ(findDeadlockedRanks(pending, blockedRanks({0, 1, 2, 3}, 4)),
            (std::vector<int>{0, 1, 2, 3}));
}

TEST(Deadlock, OnlyTheStuckPartIsReported) {
  // Ranks 0 and 1 deadlock in a process set {0, 1}; rank 2 waits on a tensor of the set {2, 3}
  // that needs rank 3, which computes: rank 2 is not deadlocked.
  std::vector<PendingView> pending = {{{0}, {1}}, {{1}, {0}}, {{2}, {3}}};
  EXPECT_EQ(findDeadlockedRanks(pending, blockedRanks({0, 1, 2}, 4)), (std::vector<int>{0, 1}));
  // Had rank 2 waited on a world tensor, it would need ranks 0 and 1 as well: stuck with them.
  std::vector<PendingView> world = {{{0}, {1}}, {{1}, {0}}, {{2}, {0, 1, 3}}};
  EXPECT_EQ(findDeadlockedRanks(world, blockedRanks({0, 1, 2}, 4)), (std::vector<int>{0, 1, 2}));
}

TEST(Deadlock, AllFourRanksWaitingInTwoPairs) {
  // 0 and 1 wait in allreduce 'a' (needs 2 and 3); 2 and 3 wait in allgather 'b' (needs 0 and 1).
  std::vector<PendingView> pending = {{{0, 1}, {2, 3}}, {{2, 3}, {0, 1}}};
  EXPECT_EQ(findDeadlockedRanks(pending, blockedRanks({0, 1, 2, 3}, 4)),
            (std::vector<int>{0, 1, 2, 3}));
  // With rank 3 computing, 'a' still needs rank 2, which waits in 'b' for 0 and 1: stuck all
  // the same, whatever rank 3 submits.
  EXPECT_EQ(findDeadlockedRanks(pending, blockedRanks({0, 1, 2}, 4)), (std::vector<int>{0, 1, 2}));
  // With ranks 2 and 3 both computing, nothing is certain.
  EXPECT_TRUE(findDeadlockedRanks(pending, blockedRanks({0, 1}, 4)).empty());
}

}  // namespace
}  // namespace hora

namespace hora {
namespace {

// The coordinator's side: wait reports, their staleness, and the errors it answers with.
class TwoRanks {
 public:
  TwoRanks() : sets_(0) {
    sets_.add(0, {0, 1}, nullptr);
    coordinator_ = std::make_unique<Coordinator>(2, sets_, Settings{}, 1);
  }
  void submit(int rank, const std::string& name, bool waiting, uint64_t applied) {
    RequestBatch b;
    b.appliedBatches = applied;
    b.waiting = waiting;
    if (!name.empty()) {
      Request r;
      r.name = name;
      r.rank = rank;
      r.shape = {4};
      r.callSite = "train.py:" + std::to_string(10 + rank);
      b.requests.push_back(r);
    }
    coordinator_->ingest(rank, b);
  }
  Coordinator& coordinator() { return *coordinator_; }

 private:
  ProcessSetTable sets_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST(CoordinatorDeadlock, CrossedWaitsFailOnceConfirmed) {
  TwoRanks job;
  job.submit(0, "a", true, 0);
  job.submit(1, "b", true, 0);
  auto t0 = Clock::now();
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0));  // first seen
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0 + Millis(100)));
  EXPECT_TRUE(job.coordinator().failDeadlocks(t0 + Millis(5000)));
  ResponseBatch batch;
  ASSERT_TRUE(job.coordinator().buildBatch(&batch));
  ASSERT_EQ(batch.responses.size(), 2u);
  for (const auto& r : batch.responses) {
    EXPECT_EQ(r.kind, OpKind::Error);
    EXPECT_EQ(r.errorCode, ResponseError::Mismatch);
    EXPECT_NE(r.errorMessage.find("rank 0: ALLREDUCE 'a' submitted at train.py:10"),
              std::string::npos)
        << r.errorMessage;
    EXPECT_NE(r.errorMessage.find("rank 1: ALLREDUCE 'b' submitted at train.py:11"),
              std::string::npos)
        << r.errorMessage;
  }
  EXPECT_TRUE(job.coordinator().pending().empty());
}

// Ranks asking alike from one line are held as one request and bits (coordinator.h): the report
// still names each of them with that line.
TEST(CoordinatorDeadlock, RanksAskingAlikeAreEachNamedWithTheirCallSite) {
  ProcessSetTable sets(0);
  sets.add(0, {0, 1, 2}, nullptr);
  Coordinator coordinator(3, sets, Settings{}, 1);
  auto submit = [&](int rank, const std::string& name, const std::string& site) {
    RequestBatch b;
    b.waiting = true;
    Request r;
    r.name = name;
    r.rank = rank;
    r.shape = {4};
    r.callSite = site;
    b.requests.push_back(r);
    coordinator.ingest(rank, b);
  };
  submit(0, "a", "train.py:10");
  submit(1, "a", "train.py:10");
  submit(2, "b", "train.py:20");
  ASSERT_EQ(coordinator.pending().at(tensorKey(0, "a")).twinCount, 1);
  auto t0 = Clock::now();
  EXPECT_FALSE(coordinator.failDeadlocks(t0));
  EXPECT_TRUE(coordinator.failDeadlocks(t0 + Millis(5000)));
  ResponseBatch batch;
  ASSERT_TRUE(coordinator.buildBatch(&batch));
  ASSERT_EQ(batch.responses.size(), 2u);
  const std::string& m = batch.responses[0].errorMessage;
  EXPECT_NE(m.find("rank 1: ALLREDUCE 'a' submitted at train.py:10"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2: ALLREDUCE 'b' submitted at train.py:20"), std::string::npos) << m;
}

TEST(CoordinatorDeadlock, ARankNotWaitingIsNeverEnded) {
  TwoRanks job;
  job.submit(0, "a", true, 0);
  job.submit(1, "b", false, 0);  // submitted, then went on computing
  auto t0 = Clock::now();
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0));
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0 + Millis(60000)));
}

TEST(CoordinatorDeadlock, AWaitReportedBeforeTheLastBatchIsStale) {
  TwoRanks job;
  job.submit(0, "warm", false, 0);
  job.submit(1, "warm", false, 0);
  ResponseBatch first;
  ASSERT_TRUE(job.coordinator().buildBatch(&first));  // one batch built: ranks must apply it
  job.submit(0, "a", true, 1);
  job.submit(1, "b", true, 0);  // sent before rank 1 applied that batch, which may release it
  auto t0 = Clock::now();
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0));
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0 + Millis(5000)));
  job.submit(1, "", true, 1);  // still waiting after applying it: now it counts
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0 + Millis(5100)));
  EXPECT_TRUE(job.coordinator().failDeadlocks(t0 + Millis(10000)));
}

TEST(CoordinatorDeadlock, AnyChangeRestartsTheConfirmation) {
  TwoRanks job;
  job.submit(0, "a", true, 0);
  job.submit(1, "b", true, 0);
  auto t0 = Clock::now();
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0));
  job.submit(1, "c", true, 0);  // rank 1 submitted more: its state changed
  EXPECT_FALSE(job.coordinator().failDeadlocks(t0 + Millis(5000)));
  EXPECT_TRUE(job.coordinator().failDeadlocks(t0 + Millis(10000)));
}

}  // namespace
}  // namespace hora

namespace hora {
namespace {

TEST(CoordinatorDeadlock, TurnedOffWithTheStallInspector) {
  ProcessSetTable sets(0);
  sets.add(0, {0, 1}, nullptr);
  Settings settings;
  settings.stallCheckDisable = true;
  Coordinator coordinator(2, sets, settings, 1);
  for (int rank = 0; rank < 2; ++rank) {
    RequestBatch b;
    b.waiting = true;
    Request r;
    r.name = rank == 0 ? "a" : "b";
    r.rank = rank;
    b.requests.push_back(r);
    coordinator.ingest(rank, b);
  }
  auto t0 = Clock::now();
  EXPECT_FALSE(coordinator.failDeadlocks(t0));
  EXPECT_FALSE(coordinator.failDeadlocks(t0 + Millis(60000)));
}

}  // namespace
}  // namespace hora
