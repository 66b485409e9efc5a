// Bruck's alltoallv (core/collectives/bruck_alltoall.cc) between ranks that are threads, over
// in-memory pipes far smaller than its messages: every block reaches its rank, whatever the
// sizes (zeros included), and a rank moves bytes only with the ranks a power of two away.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"
#include "tests/cpp/thread_links.h"

namespace hora {
namespace test {
namespace {

// Bytes rank `from` sends rank `to`: 0 to 12, some zero.
size_t blockBytes(int from, int to) { return static_cast<size_t>(from * 7 + to * 3) % 13; }
uint8_t byteOf(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 17 + static_cast<int>(i));
}

struct Exchange {
  std::vector<size_t> sendBytes, recvBytes;
  std::vector<uint8_t> in, want;
};

Exchange exchangeOf(int r, int n) {
  Exchange e;
  for (int peer = 0; peer < n; ++peer) {
    e.sendBytes.push_back(blockBytes(r, peer));
    e.recvBytes.push_back(blockBytes(peer, r));
    for (size_t i = 0; i < blockBytes(r, peer); ++i) e.in.push_back(byteOf(r, peer, i));
    for (size_t i = 0; i < blockBytes(peer, r); ++i) e.want.push_back(byteOf(peer, r, i));
  }
  return e;
}

TEST(BruckAlltoall, EveryBlockReachesItsRankThroughLinksAPowerOfTwoApart) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 13, 33}) {
    ThreadNet net(n, 5);
    std::vector<std::vector<uint8_t>> got(n), want(n);
    std::vector<std::set<int>> peers(n);
    auto errors = runRanks(n, [&](int r) {
      ThreadLinks links(net, r);
      Exchange e = exchangeOf(r, n);
      got[r].assign(e.want.size(), 0xee);
      want[r] = e.want;
      collectives::alltoallvBruck(links, e.in.data(), e.sendBytes, got[r].data(), e.recvBytes);
      peers[r] = links.peers();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(errors[r], "") << "n=" << n << " rank " << r;
      EXPECT_EQ(got[r], want[r]) << "n=" << n << " rank " << r;
      std::set<int> allowed;
      for (int d = 1; d < n; d *= 2) {
        allowed.insert(collectives::wrapRank(r + d, n));
        allowed.insert(collectives::wrapRank(r - d, n));
      }
      EXPECT_EQ(peers[r], allowed) << "n=" << n << " rank " << r;
    }
  }
}

// A rank that expects another size than its peer sends fails with both sizes, after the rounds
// (so no rank waits for it); the others finish.
TEST(BruckAlltoall, ABlockOfAnotherSizeThanExpectedFailsNamingBoth) {
  const int n = 5;
  ThreadNet net(n, 64);
  auto errors = runRanks(n, [&](int r) {
    ThreadLinks links(net, r);
    Exchange e = exchangeOf(r, n);
    if (r == 0) e.recvBytes[3] += 1;
    std::vector<uint8_t> out(e.want.size() + 1);
    collectives::alltoallvBruck(links, e.in.data(), e.sendBytes, out.data(), e.recvBytes);
  });
  EXPECT_NE(
      errors[0].find("rank 3 sent " + std::to_string(blockBytes(3, 0)) +
                     " bytes to rank 0, which expected " + std::to_string(blockBytes(3, 0) + 1)),
      std::string::npos)
      << errors[0];
  for (int r = 1; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(BruckAlltoall, TheTableTakesItFrom32Ranks) {
  EXPECT_EQ(collectives::chooseAlltoall(31), collectives::AlltoallAlgorithm::Pairwise);
  EXPECT_EQ(collectives::chooseAlltoall(32), collectives::AlltoallAlgorithm::Bruck);
  EXPECT_EQ(collectives::chooseAlltoall(4096), collectives::AlltoallAlgorithm::Bruck);
  // Shared memory's rings link every pair from the start: no bytes to trade for links.
  EXPECT_EQ(collectives::chooseAlltoall(4096, true), collectives::AlltoallAlgorithm::Pairwise);
}

}  // namespace
}  // namespace test
}  // namespace hora
