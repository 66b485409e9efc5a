// The formulas, per algorithm as core/collectives writes it (n ranks, S bytes, segment G =
// kRingSegmentBytes, a(.) and b(.) the alpha and beta of the link a message takes):
//
// Ring (ring.cc, allreduceRing): the buffer is split in n blocks; n-1 reduce-scatter steps then
// n-1 allgather steps, each sending one block to the right neighbour while receiving one from the
// left. Segments pipeline inside a step, but a step forwards what the previous one received, so
// steps are sequential and every rank waits for the slowest link of the ring (inter-host as soon
// as there are two hosts):
//     T = 2 (n-1) (a + S/n b)
//
// Recursive doubling (recursive_doubling.cc): p = largest power of two <= n, e = n - p. When
// e > 0 the first 2e ranks pair up: one message of S before (the even rank folds into the odd)
// and one after (the result back). Then log2 p rounds, each exchanging the whole buffer with the
// partner vrank ^ mask:
//     T = [e > 0] 2 (a + S b) + sum over masks (a + S b)
// with each round's link the partner's (intra-host for mask < L with L a power of two).
//
// Rank-ordered (rank_ordered.cc, float Sum/Product on 3 ranks or more): block j (S/n bytes)
// belongs to rank j; in round k every rank sends segment k of every peer's block to that peer,
// all n-1 at once (runTransfers, one thread: the messages' costs add), R = ceil((S/n) / G) rounds
// (at least one); then allgathervRing: n-1 ring steps of S/n.
//     T = R (n-1) a_send + (n-1) S/n b_send  +  (n-1) (a + S/n b)
// where a_send, b_send average the rank's links: L-1 on its host, n-L elsewhere.
//
// Chain-ordered (chain_ordered.cc, float Sum/Product on 3 ranks or more): R = ceil(S / G')
// segments (at least one) of g = S / R bytes each, G' = chainSegmentBytes (S / (2 (n-1)) within
// [1 KiB, G]), go 0 -> 1 -> ... -> n-1 being folded, then
// n-1 -> 0 -> ... -> n-2 finished, one segment per link per step, every link a ring neighbour's
// (the slowest link of the ring, as for the ring). With few segments the pipeline's depth rules:
// 2 (n-1) + R - 1 steps. With many, the links 0 -> 1 ... n-3 -> n-2 carry both streams, 2 R
// segments each, so they rule: 2 R + n - 2 steps (the last finished segment then crosses n - 2
// links). Two ranks have no link that carries both: R + 1 steps.
//     T = steps (a + g b),  steps = max(2 (n-1) + R - 1, 2 R + n - 2)   (n >= 3)
//
// Bruck-ordered (bruck_ordered.cc, float Sum/Product from 5 ranks on, blocks of S/n up to 4 KiB):
// Bruck's exchange, ceil(log2 n) rounds; the round of distance d sends the pieces (S/n each) of
// the m_d slots j in [1, n) with bit d set, one message each way; then a Bruck allgather of the
// folded blocks, ceil(log2 n) rounds of min(2^k, n - 2^k) blocks each (as the gather-fold's, of
// S/n instead of S). Every round's link: the slowest of the job.
//     T = sum over d (a + m_d S/n b) + sum over rounds (a + m_k S/n b),  sum of m_k = n - 1
//
// Gather-fold (gather_fold.cc, small float Sum/Product on 3 ranks or more): a Bruck allgather of
// every rank's whole buffer, ceil(log2 n) rounds; round k sends min(2^k, n - 2^k) buffers to rank
// r - 2^k and receives as many from r + 2^k (on more than one host some pair of every round
// crosses hosts), then every rank folds the n buffers itself:
//     T = sum over rounds (a + m_k S b), sum of m_k = n - 1
//
// Hierarchical (hierarchical.cc, allreduceHierarchical over H hosts of L ranks): local
// alltoallv (alltoallvPairwise: L-1 messages of S/L, in turn), a cross allreduce of the S/L slice
// among the H ranks with the same local index (the algorithm the table picks for H and S/L,
// all inter-host), a local allgatherv (ring, L-1 steps of S/L):
//     T = (L-1)(a_l + S/L b_l) + T_cross(H, S/L) + (L-1)(a_l + S/L b_l)
#include "bench/scale/allreduce_model.h"

#include <algorithm>
#include <cmath>

namespace hora {
namespace scale {
namespace {

bool sameHost(int a, int b, const Fabric& f) { return a / f.ranksPerHost == b / f.ranksPerHost; }

double cost(const LinkCost& l, double bytes) { return l.alpha + bytes * l.beta; }

const LinkCost& slowest(int n, const Fabric& f) { return n > f.ranksPerHost ? f.inter : f.intra; }

// The vrank of recursive_doubling.cc back to a rank.
int rankOfVrank(int v, int extra) { return v < extra ? v * 2 + 1 : v + extra; }

}  // namespace

double ringSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) * cost(slowest(n, f), bytes / n);
}

double recursiveDoublingSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int extra = n - pow2;
  double t = 0;
  if (extra > 0) t += 2 * cost(sameHost(0, 1, f) ? f.intra : f.inter, bytes);  // pairs r, r+1
  for (int mask = 1; mask < pow2; mask <<= 1) {
    // Every pair exchanges at once; the round lasts as long as its slowest pair (vrank 0's
    // partner stands for all: with host-by-host placement, all pairs cross hosts or none).
    const int a = rankOfVrank(0, extra), b = rankOfVrank(mask, extra);
    t += cost(sameHost(a, b, f) ? f.intra : f.inter, bytes);
  }
  return t;
}

double rankOrderedSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  const double block = bytes / n;
  const double rounds =
      std::max(1.0, std::ceil(block / static_cast<double>(collectives::kRingSegmentBytes)));
  const int local = std::min(n, f.ranksPerHost) - 1, remote = n - 1 - local;
  const double alphaSum = local * f.intra.alpha + remote * f.inter.alpha;
  const double betaSum = local * f.intra.beta + remote * f.inter.beta;
  const double scatter = rounds * alphaSum + block * betaSum;
  return scatter + (n - 1) * cost(slowest(n, f), block);
}

double chainOrderedSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  const double segment =
      static_cast<double>(collectives::chainSegmentBytes(static_cast<size_t>(bytes), n, 1));
  const double segments = std::max(1.0, std::ceil(bytes / segment));
  const double steps =
      n == 2 ? segments + 1 : std::max(2.0 * (n - 1) + segments - 1, 2 * segments + n - 2);
  return steps * cost(slowest(n, f), bytes / segments);
}

double bruckOrderedSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  const LinkCost& link = slowest(n, f);
  const double block = bytes / n;
  double t = 0;
  for (int d = 1; d < n; d *= 2) {
    int moved = 0;
    for (int j = d; j < n; ++j) moved += (j & d) != 0;
    t += cost(link, moved * block);
  }
  return t + gatherFoldSeconds(n, block, f);
}

double gatherFoldSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  double t = 0;
  for (int have = 1, d = 1; have < n; d *= 2) {
    const int blocks = std::min(d, n - have);
    t += cost(slowest(n, f), blocks * bytes);
    have += blocks;
  }
  return t;
}

double hierarchicalSeconds(int n, double bytes, size_t elementSize, bool rankOrder,
                           const Fabric& f) {
  const int local = f.ranksPerHost, hosts = n / local;
  if (hosts < 2 || local < 2 || bytes <= 0) return -1;  // not granted: one host or one rank each
  const double slice = bytes / local;
  const double inHost = (local - 1) * cost(f.intra, slice);
  Fabric cross;
  cross.intra = f.inter;
  cross.inter = f.inter;
  cross.ranksPerHost = 1;
  const bool crossOrder = collectives::needsRankOrder(rankOrder, rankOrder, hosts);
  auto choice = realChoice(hosts, static_cast<size_t>(slice), elementSize, crossOrder);
  return inHost + secondsOf(choice, hosts, slice, cross) + inHost;
}

double lowerBoundSeconds(int n, double bytes, const Fabric& f) {
  if (n <= 1 || bytes <= 0) return 0;
  const double rounds = std::ceil(std::log2(static_cast<double>(n)));
  const double spread = 2.0 * (n - 1) / n * bytes;
  const int local = std::min(n, f.ranksPerHost), hosts = (n + local - 1) / local;
  if (hosts <= 1) return rounds * f.intra.alpha + spread * f.intra.beta;
  // Two levels: at least log2 n rounds on the faster link and log2 H of them between hosts; every
  // rank moves 2 (n-1)/n of the buffer at the faster link's speed, and every host 2 (H-1)/H of it
  // over its L ranks' links to other hosts.
  const double latency = std::max(rounds * std::min(f.intra.alpha, f.inter.alpha),
                                  std::ceil(std::log2(static_cast<double>(hosts))) * f.inter.alpha);
  const double bandwidth = std::max(spread * std::min(f.intra.beta, f.inter.beta),
                                    2.0 * (hosts - 1) / hosts * bytes * f.inter.beta / local);
  return latency + bandwidth;
}

collectives::AllreduceAlgorithm realChoice(int n, size_t bytes, size_t elementSize,
                                           bool rankOrder) {
  return collectives::chooseAllreduce(bytes, bytes / elementSize, n, rankOrder);
}

double secondsOf(collectives::AllreduceAlgorithm a, int n, double bytes, const Fabric& f) {
  switch (a) {
    case collectives::AllreduceAlgorithm::Ring: return ringSeconds(n, bytes, f);
    case collectives::AllreduceAlgorithm::RankOrdered: return rankOrderedSeconds(n, bytes, f);
    case collectives::AllreduceAlgorithm::ChainOrdered: return chainOrderedSeconds(n, bytes, f);
    case collectives::AllreduceAlgorithm::BruckOrdered: return bruckOrderedSeconds(n, bytes, f);
    case collectives::AllreduceAlgorithm::GatherFold: return gatherFoldSeconds(n, bytes, f);
    default: return recursiveDoublingSeconds(n, bytes, f);
  }
}

const char* algorithmName(collectives::AllreduceAlgorithm a) {
  switch (a) {
    case collectives::AllreduceAlgorithm::Ring: return "ring";
    case collectives::AllreduceAlgorithm::RankOrdered: return "rank_ordered";
    case collectives::AllreduceAlgorithm::ChainOrdered: return "chain_ordered";
    case collectives::AllreduceAlgorithm::BruckOrdered: return "bruck_ordered";
    case collectives::AllreduceAlgorithm::GatherFold: return "gather_fold";
    case collectives::AllreduceAlgorithm::SharedPayload: return "shared_payload";
    case collectives::AllreduceAlgorithm::Window: return "window";
    default: return "recursive_doubling";
  }
}

}  // namespace scale
}  // namespace hora
