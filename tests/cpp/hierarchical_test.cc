// The hierarchical allreduce and allgatherv over TCP ranks as threads, with hosts that do not
// follow world rank order (host of rank r = r % hosts), and the grouping's verdicts.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/collectives/hierarchical.h"
#include "core/store/memory_store.h"
#include "core/transport/hierarchical_communicator.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::unique_ptr<Communicator> hierarchical(Connection& conn, int rank, int size, int hosts,
                                           HierarchyRequest request = {Preference::On,
                                                                       Preference::On}) {
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  collectives::RankPlace place{rank % hosts, hosts, size / hosts};
  return makeGlobalCommunicator(*conn.world, all, request, place);
}

void runJob(int size, int hosts) {
  MemoryStore store;
  test::spawnRanks(size, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, size, "hierarchical-test");
    Connection conn = makeTransport("tcp")->connect(o, store);
    auto comm = hierarchical(conn, rank, size, hosts);
    require(comm->hierarchicalAllreduce() && comm->hierarchicalAllgather(), "flat path chosen");
    for (size_t count : {0, 1, 5, 17, 1001, 40000}) {
      std::vector<int64_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int64_t>(i * 7 + rank * 1000);
      comm->allreduce(buf.data(), count, DataType::Int64, ReduceOp::Sum);
      for (size_t i = 0; i < count; ++i) {
        int64_t want = static_cast<int64_t>(i * 7 * size) + 1000LL * size * (size - 1) / 2;
        require(buf[i] == want, "allreduce count " + std::to_string(count) + " element " +
                                    std::to_string(i) + " on rank " + std::to_string(rank));
      }
    }
    for (int scale : {0, 1, 13, 5000}) {
      // Uneven blocks, some empty: rank r sends (r * scale) % 7 * scale bytes of value r + 1.
      std::vector<size_t> bytes(size);
      for (int r = 0; r < size; ++r) bytes[r] = static_cast<size_t>((r * scale) % 7) * scale;
      size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
      std::vector<uint8_t> in(bytes[rank], static_cast<uint8_t>(rank + 1)), out(total, 0);
      comm->allgatherv(in.data(), out.data(), bytes);
      size_t at = 0;
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < bytes[r]; ++i) {
          require(out[at + i] == r + 1, "allgatherv block of rank " + std::to_string(r) +
                                            " on rank " + std::to_string(rank));
        }
        at += bytes[r];
      }
    }
  });
}

TEST(Hierarchical, TwoHostsOfThreeInterleaved) { runJob(6, 2); }
TEST(Hierarchical, ThreeHostsOfTwoInterleaved) { runJob(6, 3); }
TEST(Hierarchical, TwoHostsOfOne) { runJob(2, 2); }

// What makeGlobalCommunicator grants each rank of a job of `size` ranks on `hosts` hosts when
// rank r asks for the allreduce with prefs[r] (the allgather left Off).
struct Granted {
  bool allreduce = false, gpuAllreduce = false;
};
std::vector<Granted> grantedFor(int size, int hosts, const std::vector<Preference>& prefs) {
  MemoryStore store;
  std::vector<Granted> granted(size);
  test::spawnRanks(size, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, size, "hierarchical-choice-test");
    Connection conn = makeTransport("tcp")->connect(o, store);
    auto comm = hierarchical(conn, rank, size, hosts, {prefs[rank], Preference::Off});
    granted[rank] = {comm->hierarchicalAllreduce(), gpuHierarchy(comm.get()) != nullptr};
    require(!comm->hierarchicalAllgather(), "allgather granted though Off");
  });
  return granted;
}

TEST(Hierarchical, LeftToTheEngineItRunsForCpuTensorsWhenHostsShareRanks) {
  using P = Preference;
  for (const Granted& g : grantedFor(4, 2, {P::Auto, P::Auto, P::Auto, P::Auto})) {
    EXPECT_TRUE(g.allreduce);
    EXPECT_FALSE(g.gpuAllreduce);  // NCCL knows the hosts itself: GPU tensors only when asked
  }
  for (const Granted& g : grantedFor(4, 2, {P::On, P::On, P::On, P::On})) {
    EXPECT_TRUE(g.allreduce);
    EXPECT_TRUE(g.gpuAllreduce);
  }
  for (const Granted& g : grantedFor(4, 2, {P::On, P::Auto, P::Auto, P::Auto})) {
    EXPECT_TRUE(g.allreduce);
    EXPECT_FALSE(g.gpuAllreduce);
  }
}

TEST(Hierarchical, OffOnAnyRankOrOneRankPerHostKeepsTheFlatPath) {
  using P = Preference;
  for (const Granted& g : grantedFor(4, 2, {P::Auto, P::Auto, P::Off, P::On})) {
    EXPECT_FALSE(g.allreduce);
  }
  for (const Granted& g : grantedFor(2, 2, {P::Auto, P::Auto})) EXPECT_FALSE(g.allreduce);
  for (const Granted& g : grantedFor(2, 2, {P::On, P::On})) EXPECT_TRUE(g.allreduce);
  for (const Granted& g : grantedFor(3, 1, {P::Auto, P::Auto, P::Auto})) {
    EXPECT_FALSE(g.allreduce);  // one host
  }
}

TEST(Hierarchical, GroupingVerdicts) {
  using collectives::RankPlace;
  EXPECT_EQ(collectives::groupHosts({{0, 1, 2}, {0, 1, 2}}).whyNot, "every rank runs on one host");
  auto unequal = collectives::groupHosts({{0, 2, 2}, {0, 2, 2}, {1, 1, 1}});
  EXPECT_NE(unequal.whyNot.find("hosts run different numbers of ranks"), std::string::npos);
  auto ok = collectives::groupHosts({{1, 2, 2}, {0, 2, 2}, {1, 2, 2}, {0, 2, 2}});
  EXPECT_EQ(ok.whyNot, "");
  EXPECT_EQ(ok.hosts, (std::vector<std::vector<int>>{{1, 3}, {0, 2}}));
}

}  // namespace
}  // namespace hora
