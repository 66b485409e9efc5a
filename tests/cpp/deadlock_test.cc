// findDeadlockedRanks: which blocked ranks no future submission can release.
#include <gtest/gtest.h>

#include "core/coordinator/deadlock.h"

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
