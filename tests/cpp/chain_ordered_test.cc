// allreduceChainOrdered against allreduceRankOrdered, both run directly over bounded in-memory
// pipes (thread_links.h): the same bits on every rank for 1 to 7 ranks, every floating dtype,
// Sum/Product/Min/Max, and counts 0, 1, odd, not divisible by the ranks and over several
// segments; and bytes only ever move between ring neighbours.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"
#include "tests/cpp/ordered_runs.h"
#include "tests/cpp/thread_links.h"

namespace hora {
namespace test {
namespace {

TEST(ChainOrdered, GivesTheRankOrderedBitsForEveryFloatDtypeOpAndSize) {
  for (int n = 1; n <= 7; ++n) {
    for (DataType dtype :
         {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64}) {
      const size_t segment = collectives::kRingSegmentBytes / dtypeSize(dtype);
      // 0, 1, odd, not divisible by n, and three segments with a short last one.
      for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, size_t{7 * 11 + 3},
                           2 * segment + static_cast<size_t>(n) + 1}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max}) {
          expectRankOrderedBits(collectives::allreduceChainOrdered, n, count, dtype, op, 1000);
        }
      }
    }
  }
}

// The first element, summed in float32 on 3 ranks, must be ((v0 + v1) + v2) exactly: the check
// that the reference itself folds in rank order, so the comparison above means something.
TEST(ChainOrdered, FoldsLeftToRightInRankOrder) {
  const float v[3] = {1e8f, -1e8f, 1.0f};  // (v0 + v1) + v2 = 1; v0 + (v1 + v2) = 0
  ThreadNet net(3, 64);
  std::vector<float> got(3);
  auto errors = runRanks(3, [&](int r) {
    ThreadLinks links(net, r);
    float x = v[r];
    collectives::allreduceChainOrdered(links, &x, 1, DataType::Float32, ReduceOp::Sum);
    got[r] = x;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(got[r], 1.0f) << "rank " << r;
  }
}

// Pipes far smaller than a segment (and than an element's multiple) cannot stall the chain, and
// a rank never moves a byte with anyone but its two ring neighbours.
TEST(ChainOrdered, MovesBytesOnlyBetweenRingNeighboursThroughTinyPipes) {
  for (int n : {2, 3, 5, 7}) {
    const size_t count = 20003;  // 2 to 5 segments (chainSegmentBytes)
    std::vector<std::set<int>> peers;
    expectRankOrderedBits(collectives::allreduceChainOrdered, n, count, DataType::Float32,
                          ReduceOp::Sum, 61, &peers);
    for (int r = 0; r < n; ++r) {
      std::set<int> ring = {collectives::wrapRank(r - 1, n), collectives::wrapRank(r + 1, n)};
      EXPECT_EQ(peers[r], ring) << "n=" << n << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace hora
