// The allreduce algorithm the table picks by size and rank count (core/collectives/
// algorithm_table.h): the choices the collective matrix then checks bit for bit.
#include <gtest/gtest.h>

#include "core/collectives/algorithm_table.h"

namespace hora {
namespace collectives {
namespace {

AllreduceAlgorithm orderSensitive(size_t bytes, int size) {
  return chooseAllreduce(bytes, bytes / 4, size, needsRankOrder(true, true, size));
}

TEST(AlgorithmTable, SmallOrderSensitiveAllreducesGatherAndFoldAtEveryRankCount) {
  for (int size : {3, 4, 7, 64, 1024, 4096}) {
    EXPECT_EQ(orderSensitive(4, size), AllreduceAlgorithm::GatherFold) << size;
  }
  // Up to kGatherFoldMaxBytes from the N-1 peers together, then the chain in rank order below
  // kBruckOrderedMinRanks.
  EXPECT_EQ(orderSensitive(32 << 10, 3), AllreduceAlgorithm::GatherFold);
  EXPECT_EQ(orderSensitive((32 << 10) + 4, 3), AllreduceAlgorithm::ChainOrdered);
  EXPECT_EQ(orderSensitive(64, 1025), AllreduceAlgorithm::GatherFold);
  // From 5 ranks on, the Bruck-ordered allreduce while each rank's block is at most 4 KiB.
  EXPECT_EQ(orderSensitive(128, 1025), AllreduceAlgorithm::BruckOrdered);
  EXPECT_EQ(orderSensitive(4096 * 1025, 1025), AllreduceAlgorithm::BruckOrdered);
  EXPECT_EQ(orderSensitive(4096 * 1025 + 4, 1025), AllreduceAlgorithm::ChainOrdered);
  EXPECT_EQ(orderSensitive(20 << 10, 5), AllreduceAlgorithm::BruckOrdered);
  EXPECT_EQ(orderSensitive((20 << 10) + 4, 5), AllreduceAlgorithm::ChainOrdered);
  EXPECT_EQ(orderSensitive(16 << 10, 5), AllreduceAlgorithm::GatherFold);
  EXPECT_EQ(orderSensitive(16 << 10, 4), AllreduceAlgorithm::GatherFold);
  EXPECT_EQ(orderSensitive(24 << 10, 4), AllreduceAlgorithm::RankOrdered);  // below 5 ranks
  // Above it the chain, except at 4 ranks (kRankOrderedRanks).
  for (int size : {3, 5, 7, 64, 4096}) {
    EXPECT_EQ(orderSensitive(64 << 20, size), AllreduceAlgorithm::ChainOrdered) << size;
  }
  EXPECT_EQ(orderSensitive(64 << 20, 4), AllreduceAlgorithm::RankOrdered);
}

TEST(AlgorithmTable, OrderFreeAllreducesTakeRecursiveDoublingOrTheRing) {
  EXPECT_EQ(orderSensitive(4, 2), AllreduceAlgorithm::RecursiveDoubling);  // a + b == b + a
  EXPECT_EQ(chooseAllreduce(4, 1, 4096, false), AllreduceAlgorithm::RecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(64 << 20, 16 << 20, 4096, false), AllreduceAlgorithm::Ring);
  // The shared segment's own paths come first.
  EXPECT_EQ(chooseAllreduce(4, 1, 4, true, true), AllreduceAlgorithm::SharedPayload);
  EXPECT_EQ(chooseAllreduce(4096, 1024, 4, true, false, true), AllreduceAlgorithm::Window);
}

// The Bruck allgather from 32 ranks for blocks of 16 KiB on average or less; the ring otherwise.
TEST(AlgorithmTable, SmallAllgathersOfManyRanksTakeBrucksRounds) {
  EXPECT_EQ(chooseAllgather(4 * 31, 31), AllgatherAlgorithm::Ring);
  EXPECT_EQ(chooseAllgather(4 * 32, 32), AllgatherAlgorithm::Bruck);
  EXPECT_EQ(chooseAllgather((16 << 10) * 32, 32), AllgatherAlgorithm::Bruck);
  EXPECT_EQ(chooseAllgather((16 << 10) * 32 + 1, 32), AllgatherAlgorithm::Ring);
  EXPECT_EQ(chooseAllgather(size_t{16} << 20, 4096), AllgatherAlgorithm::Bruck);
  EXPECT_EQ(chooseAllgather(size_t{1} << 30, 4096), AllgatherAlgorithm::Ring);
}

AllreduceAlgorithm onOneHost(size_t bytes, int size) {
  return chooseAllreduce(bytes, bytes / 4, size, needsRankOrder(true, true, size), true, true);
}

// A shared payload up to 8 KiB, and while every rank's fold reads at most 32 KiB of payloads;
// the window above.
TEST(AlgorithmTable, SmallAllreducesOnOneHostAreSharedPayloadsUpToTheirFoldLimit) {
  for (int size : {2, 3, 4}) {
    EXPECT_EQ(onOneHost(4, size), AllreduceAlgorithm::SharedPayload) << size;
    EXPECT_EQ(onOneHost(8 << 10, size), AllreduceAlgorithm::SharedPayload) << size;
    EXPECT_EQ(onOneHost((8 << 10) + 4, size), AllreduceAlgorithm::Window) << size;
  }
  EXPECT_EQ(sharedPayloadMaxBytes(8), size_t{4} << 10);
  EXPECT_EQ(onOneHost(4 << 10, 8), AllreduceAlgorithm::SharedPayload);
  EXPECT_EQ(onOneHost((4 << 10) + 4, 8), AllreduceAlgorithm::Window);
  EXPECT_EQ(onOneHost(4, 64), AllreduceAlgorithm::SharedPayload);
  EXPECT_EQ(onOneHost(1 << 10, 64), AllreduceAlgorithm::Window);
}

}  // namespace
}  // namespace collectives
}  // namespace hora
