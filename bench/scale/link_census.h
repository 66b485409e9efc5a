#pragma once
// Which peers each algorithm of core/collectives/ moves bytes with, at any N: the TCP links a
// rank opens for it, now that links open on first use (core/transport/tcp/link_opener.h).
//
// The real algorithm code runs for one rank at a time against Links whose pipes always move
// everything asked at once (received bytes are zeros): the peers and sizes of these algorithms
// depend only on N, the rank, the counts and the root, never on the data, so a rank run alone
// touches exactly the peers it would with its peers present. A peer counts once bytes moved
// either way. Every rank is run up to kCensusAllRanks ranks; above, an evenly spaced sample of
// them with the first, second, middle and last (the census says how many).
#include <string>
#include <vector>

namespace hora {
namespace scale {

constexpr int kCensusAllRanks = 512;

struct LinkCensus {
  std::string algorithm;  // "allreduce ring", ...
  int ranks = 0;
  int sampled = 0;   // ranks run
  int maxPeers = 0;  // over the ranks run
  double meanPeers = 0;
  int rank0Peers = 0;
  // Hierarchical rows: peers on other hosts (TCP) and on this rank's host (shared memory when
  // the host's ranks can share it, else TCP); maxPeers counts both. -1 on the flat rows.
  int maxCrossHostPeers = -1;
  int maxHostPeers = -1;
};

// Every algorithm's census at n ranks; the hierarchical rows with ranksPerHost ranks per host
// (left out when ranksPerHost does not divide n or there is only one host).
std::vector<LinkCensus> linkCensus(int n, int ranksPerHost);

}  // namespace scale
}  // namespace hora
