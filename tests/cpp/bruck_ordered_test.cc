// The Bruck-ordered allreduce (core/collectives/bruck_ordered.cc) against the rank-ordered one,
// and the Bruck allgather under it (bruck_allgather.cc), run directly over bounded in-memory pipes
// (thread_links.h): the same bits on every rank for 1 to 33 ranks, every floating dtype,
// Sum/Product/Min/Max, and counts 0, 1, fewer than the ranks, odd and not divisible by the ranks;
// every block in place after the allgather, zeros included; and bytes only ever move with the
// ranks a power of two away.
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

// The ranks a power of two away from r, either way.
std::set<int> powerOfTwoPartners(int r, int n) {
  std::set<int> partners;
  for (int d = 1; d < n; d *= 2) {
    partners.insert(collectives::wrapRank(r + d, n));
    partners.insert(collectives::wrapRank(r - d, n));
  }
  return partners;
}

TEST(BruckOrdered, GivesTheRankOrderedBitsForEveryFloatDtypeOpAndSize) {
  for (int n : {1, 2, 3, 5, 6, 8, 13}) {
    for (DataType dtype :
         {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64}) {
      // 0, 1, fewer than the ranks (empty blocks), odd, and not divisible by n.
      for (size_t count :
           {size_t{0}, size_t{1}, static_cast<size_t>(n - 1), size_t{1003}, size_t{7 * 11 + 3}}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max}) {
          expectRankOrderedBits(collectives::allreduceBruckOrdered, n, count, dtype, op, 1000);
        }
      }
    }
  }
}

// More ranks than the table's smallest Bruck-ordered job, blocks of the table's largest size and
// pipes far smaller than a piece: still the rank-ordered bits, and a rank moves bytes only with
// the ranks a power of two away.
TEST(BruckOrdered, MovesBytesOnlyWithRanksAPowerOfTwoAwayThroughTinyPipes) {
  for (int n : {5, 9, 33}) {
    const size_t count = collectives::kBruckOrderedMaxBlockBytes / 4 * static_cast<size_t>(n) - 3;
    ASSERT_EQ(collectives::chooseAllreduce(count * 4, count, n, true),
              collectives::AllreduceAlgorithm::BruckOrdered)
        << n;
    std::vector<std::set<int>> peers;
    expectRankOrderedBits(collectives::allreduceBruckOrdered, n, count, DataType::Float32,
                          ReduceOp::Sum, 251, &peers);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(peers[r], powerOfTwoPartners(r, n)) << "n=" << n << " rank " << r;
    }
  }
}

// Bytes rank `r` contributes to the allgather: 0 to 10, some zero.
size_t blockBytes(int r) { return static_cast<size_t>(r * 7 + 3) % 11; }
uint8_t byteOf(int r, size_t i) { return static_cast<uint8_t>(r * 29 + static_cast<int>(i) + 1); }

TEST(BruckAllgather, EveryRanksBlockReachesEveryRankInPlace) {
  for (int n : {1, 2, 3, 5, 7, 8, 13, 33}) {
    std::vector<size_t> bytes;
    std::vector<uint8_t> want;
    for (int r = 0; r < n; ++r) {
      bytes.push_back(blockBytes(r));
      for (size_t i = 0; i < blockBytes(r); ++i) want.push_back(byteOf(r, i));
    }
    const std::vector<size_t> at = collectives::startsOf(bytes);
    ThreadNet net(n, 7);
    std::vector<std::vector<uint8_t>> got(n);
    std::vector<std::set<int>> peers(n);
    auto errors = runRanks(n, [&](int r) {
      ThreadLinks links(net, r);
      got[r].assign(want.size(), 0xee);
      // This rank's block already in its place in the output (the in-place call).
      for (size_t i = 0; i < bytes[r]; ++i) got[r][at[r] + i] = byteOf(r, i);
      collectives::allgathervBruck(links, got[r].data() + at[r], got[r].data(), bytes);
      peers[r] = links.peers();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(errors[r], "") << "n=" << n << " rank " << r;
      EXPECT_EQ(got[r], want) << "n=" << n << " rank " << r;
      for (int p : peers[r]) {
        EXPECT_EQ(powerOfTwoPartners(r, n).count(p), 1u) << "n=" << n << " rank " << r << " " << p;
      }
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace hora
