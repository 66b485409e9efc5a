// The scale simulator (bench/scale/) at small N: its counts follow from the protocol, its
// alpha-beta model from the closed forms of the algorithms, and its link census from the peers
// each algorithm is written to use.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "bench/scale/allreduce_model.h"
#include "bench/scale/control_census.h"
#include "bench/scale/link_census.h"
#include "bench/scale/negotiation_sim.h"
#include "core/common/bits.h"

namespace hora {
namespace scale {
namespace {

SimConfig smallJob(int n, int t) {
  SimConfig c;
  c.worldSize = n;
  c.tensors = t;
  c.chunks = 1;
  return c;
}

// The bytes of a rank's cached report: every slot 0..t-1 by bit, after `applied` batches.
size_t cachedReportBytes(int t, uint64_t applied) {
  RequestBatch b;
  b.appliedBatches = applied;
  for (int s = 0; s < t; ++s) setBit(b.cacheBits, static_cast<size_t>(s));
  return encodeRequestBatch(b).size();
}

TEST(ScaleSim, MessageCountsFollowTheProtocol) {
  const int n = 8, t = 10;
  NegotiationSim sim(smallJob(n, t));
  StepStats first = sim.runStep();
  // Every tensor goes in full once from every rank; the ten 16 KiB allreduces fuse into one.
  EXPECT_EQ(first.fullRequests, n * t);
  EXPECT_EQ(first.collectives, 1);
  EXPECT_EQ(first.responseBatches, 1);
  // Rank 1 sends one batch and receives every batch rank 0 built; rank 0 the mirror image.
  EXPECT_EQ(first.rank1.messagesSent, 1u);
  EXPECT_EQ(first.rank1.messagesReceived, static_cast<uint64_t>(first.responseBatches));
  EXPECT_EQ(first.rank0.messagesReceived, static_cast<uint64_t>(n - 1));
  EXPECT_EQ(first.rank0.messagesSent, static_cast<uint64_t>((n - 1) * first.responseBatches));
  EXPECT_EQ(first.rank0.bytesReceived, (n - 1) * first.rank1.bytesSent);
  EXPECT_EQ(first.rank0.bytesSent, (n - 1) * first.rank1.bytesReceived);

  StepStats cached = sim.runStep();
  EXPECT_EQ(cached.fullRequests, 0);
  EXPECT_EQ(cached.collectives, 1);
  // A cached report is the codec's encoding of t bits.
  EXPECT_EQ(cached.rank1.bytesSent,
            cachedReportBytes(t, static_cast<uint64_t>(first.responseBatches)));
  EXPECT_LT(cached.rank1.bytesSent, first.rank1.bytesSent);
  EXPECT_GT(first.negotiationCpuS(), 0.0);
}

TEST(ScaleSim, ZeroFusionThresholdRunsOneCollectivePerTensor) {
  SimConfig c = smallJob(8, 10);
  c.fusionThreshold = 0;
  NegotiationSim sim(c);
  EXPECT_EQ(sim.runStep().collectives, 10);
  EXPECT_EQ(sim.runStep().collectives, 10);
}

TEST(ScaleSim, RandomOrderInPartsCompletesFromTheCache) {
  SimConfig c = smallJob(8, 10);
  c.randomOrder = true;
  c.chunks = 3;
  NegotiationSim sim(c);
  StepStats first = sim.runStep();
  EXPECT_EQ(first.fullRequests, 80);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(sim.runStep().fullRequests, 0);
}

TEST(ScaleSim, ACacheSmallerThanTheStepRenegotiatesInFull) {
  SimConfig c = smallJob(8, 10);
  c.cacheCapacity = 4;
  c.fusionThreshold = 0;
  NegotiationSim sim(c);
  sim.runStep();
  StepStats later = sim.runStep();
  EXPECT_GT(later.fullRequests, 0);
  EXPECT_EQ(later.collectives, 10);
}

// Random orders, parts and caches smaller than a step: every step completes with every tensor
// answered once on every rank (the simulator stops on a response for a tensor a rank never
// submitted, as a rank counted twice at the coordinator produced before the participant's fix).
TEST(ScaleSim, RandomOrdersWithSmallCachesCompleteEveryStep) {
  for (int n : {2, 3, 5}) {
    for (int capacity : {1, 2, 8}) {
      for (int chunks : {2, 3}) {
        for (uint64_t seed = 1; seed <= 4; ++seed) {
          SimConfig c = smallJob(n, 6);
          c.randomOrder = true;
          c.cacheCapacity = capacity;
          c.chunks = chunks;
          c.seed = seed;
          NegotiationSim sim(c);
          for (int step = 0; step < 5; ++step) {
            EXPECT_NO_THROW(sim.runStep()) << "n=" << n << " capacity=" << capacity
                                           << " chunks=" << chunks << " seed=" << seed;
          }
        }
      }
    }
  }
}

Fabric flat(double alpha, double gbits) {
  Fabric f;
  f.intra = {alpha, 8.0 / (gbits * 1e9)};
  f.inter = f.intra;
  return f;
}

TEST(ScaleSim, ModelMatchesTheClosedForms) {
  const Fabric f = flat(5e-6, 10);
  const double a = 5e-6, b = 8.0 / 10e9;
  for (double s : {4.0, 16384.0, 1048576.0, 268435456.0}) {
    EXPECT_DOUBLE_EQ(ringSeconds(8, s, f), 14 * (a + s / 8 * b));
    EXPECT_DOUBLE_EQ(recursiveDoublingSeconds(8, s, f), 3 * (a + s * b));
    // 6 ranks: 4 remain after two pairs fold (one message before, one after).
    EXPECT_DOUBLE_EQ(recursiveDoublingSeconds(6, s, f), 4 * (a + s * b));
    for (int n : {2, 3, 8, 64, 1000}) {
      const double bound = lowerBoundSeconds(n, s, f);
      EXPECT_LE(bound, ringSeconds(n, s, f) * (1 + 1e-12));
      EXPECT_LE(bound, recursiveDoublingSeconds(n, s, f) * (1 + 1e-12));
      EXPECT_LE(bound, rankOrderedSeconds(n, s, f) * (1 + 1e-12));
      EXPECT_LE(bound, chainOrderedSeconds(n, s, f) * (1 + 1e-12));
      EXPECT_LE(bound, gatherFoldSeconds(n, s, f) * (1 + 1e-12));
      EXPECT_LE(bound, bruckOrderedSeconds(n, s, f) * (1 + 1e-12));
    }
  }
  // Bruck-ordered at 8 ranks and 8 KiB (blocks of 1 KiB): the exchange's rounds of distance 1, 2
  // and 4 move the slots with that bit (4 each), then the allgather's rounds 1, 2 and 4 blocks;
  // at 6 ranks, slots 1 3 5, 2 3, 4 5, then 1, 2 and 2 blocks.
  EXPECT_DOUBLE_EQ(bruckOrderedSeconds(8, 8192, f), 6 * a + (12 + 7) * 1024 * b);
  EXPECT_DOUBLE_EQ(bruckOrderedSeconds(6, 6144, f), 6 * a + (7 + 5) * 1024 * b);
  // Gather-fold at 8 ranks: three Bruck rounds of 1, 2 and 4 buffers; at 6: 1, 2 and 2.
  EXPECT_DOUBLE_EQ(gatherFoldSeconds(8, 4, f), 3 * a + 7 * 4 * b);
  EXPECT_DOUBLE_EQ(gatherFoldSeconds(6, 4, f), 3 * a + 5 * 4 * b);
  // Rank-ordered at 8 ranks and 8 KiB: one round of 7 messages, then a 7-step ring allgather.
  EXPECT_DOUBLE_EQ(rankOrderedSeconds(8, 8192, f), 7 * a + 7 * 1024 * b + 7 * (a + 1024 * b));
  // Chain-ordered at 8 ranks: 8 KiB in 8 segments of 1 KiB (the floor), 2 * 7 + 8 - 1 steps; 64
  // segments of G: 2 * 64 + 6 steps, the links that carry both streams rule; at 2 ranks, 64
  // segments there and back: 65 steps.
  const double g = collectives::kRingSegmentBytes;
  EXPECT_DOUBLE_EQ(chainOrderedSeconds(8, 8192, f), 22 * (a + 1024 * b));
  EXPECT_DOUBLE_EQ(chainOrderedSeconds(8, 512, f), 14 * (a + 512 * b));
  EXPECT_DOUBLE_EQ(chainOrderedSeconds(8, 64 * g, f), 134 * (a + g * b));
  EXPECT_DOUBLE_EQ(chainOrderedSeconds(2, 64 * g, f), 65 * (a + g * b));
}

TEST(ScaleSim, HierarchicalModelComposesItsThreeSteps) {
  Fabric f;
  f.intra = {1e-6, 8.0 / 100e9};
  f.inter = {5e-6, 8.0 / 10e9};
  f.ranksPerHost = 4;
  const double s = 1 << 20;
  // 8 ranks on 2 hosts: 3 local messages of S/4 each way, then 2 hosts allreduce S/4.
  const double local = 3 * (f.intra.alpha + s / 4 * f.intra.beta);
  Fabric cross = f;
  cross.intra = f.inter;
  cross.ranksPerHost = 1;
  const double crossTime = ringSeconds(2, s / 4, cross);  // 256 KiB over 2 ranks: the ring
  EXPECT_DOUBLE_EQ(hierarchicalSeconds(8, s, 4, true, f), 2 * local + crossTime);
  EXPECT_LT(hierarchicalSeconds(4, s, 4, true, f), 0);  // one host: not granted
  // Every algorithm stays above the two-level bound, at every size and job size.
  for (double bytes = 4; bytes <= (1 << 28); bytes *= 4) {
    for (int n : {8, 64, 1024, 4096}) {
      const double bound = lowerBoundSeconds(n, bytes, f) * (1 - 1e-12);
      EXPECT_LE(bound, hierarchicalSeconds(n, bytes, 4, true, f)) << n << " " << bytes;
      EXPECT_LE(bound, ringSeconds(n, bytes, f)) << n << " " << bytes;
      EXPECT_LE(bound, recursiveDoublingSeconds(n, bytes, f)) << n << " " << bytes;
      EXPECT_LE(bound, rankOrderedSeconds(n, bytes, f)) << n << " " << bytes;
      EXPECT_LE(bound, chainOrderedSeconds(n, bytes, f)) << n << " " << bytes;
      EXPECT_LE(bound, gatherFoldSeconds(n, bytes, f)) << n << " " << bytes;
      EXPECT_LE(bound, bruckOrderedSeconds(n, bytes, f)) << n << " " << bytes;
    }
  }
}

TEST(ScaleSim, ReportsTheRealAlgorithmChoice) {
  using A = collectives::AllreduceAlgorithm;
  EXPECT_EQ(realChoice(8, 4, 4, true), A::GatherFold);
  EXPECT_EQ(realChoice(8, 1 << 20, 4, true), A::ChainOrdered);
  EXPECT_EQ(realChoice(4096, 64 << 10, 4, true), A::BruckOrdered);
  EXPECT_EQ(realChoice(2, 4, 4, false), A::RecursiveDoubling);
  EXPECT_EQ(realChoice(2, 1 << 20, 4, false), A::Ring);
  // Fewer elements than ranks: recursive doubling at any size.
  EXPECT_EQ(realChoice(4096, 4096 * 4 - 4, 4, false), A::RecursiveDoubling);
}

// Ring neighbours, log2 N partners, tree children, everyone: the census of the real code gives
// the peer counts each algorithm's description promises, at a power of two and off it.
TEST(ScaleSim, LinkCensusCountsThePeersEachAlgorithmUses) {
  for (int n : {2, 3, 8, 12, 64, 1024}) {
    std::map<std::string, LinkCensus> byName;
    for (const LinkCensus& c : linkCensus(n, 4)) byName[c.algorithm] = c;
    const int ceilLog2 = static_cast<int>(std::ceil(std::log2(n)));
    const int floorLog2 = static_cast<int>(std::floor(std::log2(n)));
    const bool power = (n & (n - 1)) == 0;
    const std::string at = "n=" + std::to_string(n);
    for (const char* ring : {"allreduce ring", "allgatherv ring", "reducescatter ring"}) {
      EXPECT_EQ(byName[ring].maxPeers, std::min(2, n - 1)) << at << " " << ring;
      EXPECT_EQ(byName[ring].meanPeers, std::min(2, n - 1)) << at << " " << ring;
    }
    EXPECT_EQ(byName["broadcast chain"].maxPeers, std::min(2, n - 1)) << at;
    EXPECT_EQ(byName["broadcast chain"].rank0Peers, 1) << at;
    // log2 N partners; off a power of two, the ranks that fold first also meet their partner.
    EXPECT_EQ(byName["allreduce recursive doubling"].maxPeers, floorLog2 + (power ? 0 : 1)) << at;
    EXPECT_EQ(byName["broadcast binomial tree"].rank0Peers, ceilLog2) << at;
    // Bruck and dissemination: one peer each way per round.
    EXPECT_LE(byName["allreduce gather-fold"].maxPeers, 2 * ceilLog2) << at;
    EXPECT_GE(byName["allreduce gather-fold"].maxPeers, ceilLog2) << at;
    EXPECT_LE(byName["barrier dissemination"].maxPeers, 2 * ceilLog2) << at;
    EXPECT_LE(byName["allgatherv bruck"].maxPeers, 2 * ceilLog2) << at;
    EXPECT_GE(byName["allgatherv bruck"].maxPeers, ceilLog2) << at;
    EXPECT_LE(byName["allreduce bruck-ordered"].maxPeers, 2 * ceilLog2) << at;
    EXPECT_GE(byName["allreduce bruck-ordered"].maxPeers, ceilLog2) << at;
    EXPECT_EQ(byName["allreduce rank-ordered"].maxPeers, n - 1) << at;
    // The chain in rank order: ring neighbours only, at every N.
    EXPECT_EQ(byName["allreduce chain-ordered"].maxPeers, std::min(2, n - 1)) << at;
    EXPECT_EQ(byName["allreduce chain-ordered"].meanPeers, std::min(2, n - 1)) << at;
    EXPECT_EQ(byName["allreduce chain-ordered"].rank0Peers, std::min(2, n - 1)) << at;
    EXPECT_EQ(byName["alltoallv pairwise"].maxPeers, n - 1) << at;
    EXPECT_EQ(byName["alltoallv pairwise"].sampled, n <= kCensusAllRanks ? n : 258) << at;
    EXPECT_LE(byName["alltoallv bruck"].maxPeers, 2 * ceilLog2) << at;
    EXPECT_GE(byName["alltoallv bruck"].maxPeers, ceilLog2) << at;
  }
}

// With 4 ranks per host: the host's ranks exchange slices with each other (L - 1 peers on the
// host), and across hosts each rank meets the peers of the algorithm the table picks for its
// slice among the H hosts: recursive doubling (log2 H), the ring (2), or for float Sum from 3
// hosts on the chain-ordered allreduce (2, its ring neighbours).
TEST(ScaleSim, LinkCensusSplitsHierarchicalPeersByHost) {
  const int n = 64, perHost = 4, hosts = n / perHost;
  std::map<std::string, LinkCensus> byName;
  for (const LinkCensus& c : linkCensus(n, perHost)) byName[c.algorithm] = c;
  const LinkCensus& small = byName["hierarchical allreduce 1 KiB int32"];
  EXPECT_EQ(small.maxHostPeers, perHost - 1);
  EXPECT_EQ(small.maxCrossHostPeers, static_cast<int>(std::log2(hosts)));
  EXPECT_EQ(small.maxPeers, perHost - 1 + static_cast<int>(std::log2(hosts)));
  EXPECT_EQ(byName["hierarchical allreduce 1 MiB int32"].maxCrossHostPeers, 2);
  EXPECT_EQ(byName["hierarchical allreduce 1 MiB float32 Sum"].maxCrossHostPeers, 2);
  EXPECT_EQ(byName["allreduce ring"].maxCrossHostPeers, -1);
  // One host: no hierarchical rows.
  for (const LinkCensus& c : linkCensus(4, 4)) EXPECT_EQ(c.maxCrossHostPeers, -1) << c.algorithm;
}

// The control tree of fanout 32: a star up to 33 ranks, then rank 0 keeps 32 connections and a
// relay's round trip grows by two alphas per extra level.
TEST(ScaleSim, ControlCensusFollowsTheTree) {
  ControlCensus star = controlCensus(33, 32, 5e-6);
  EXPECT_EQ(star.rank0Sockets, 32);
  EXPECT_EQ(star.depth, 1);
  EXPECT_EQ(star.extraRoundTripS, 0.0);
  ControlCensus big = controlCensus(4096, 32, 5e-6);
  EXPECT_EQ(big.rank0Sockets, 32);
  EXPECT_EQ(big.starRank0Sockets, 4095);
  EXPECT_EQ(big.rank0Copies, 32);
  EXPECT_EQ(big.maxSockets, 33);
  EXPECT_EQ(big.depth, 3);  // 1 + 32 + 1024 < 4096 <= 1 + 32 + 1024 + 32768
  EXPECT_DOUBLE_EQ(big.extraRoundTripS, 4 * 5e-6);
}

}  // namespace
}  // namespace scale
}  // namespace hora
