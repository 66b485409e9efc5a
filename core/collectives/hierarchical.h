#pragma once
// Hierarchical collectives for a job whose ranks sit on several hosts with the same number of
// ranks on each: the work is split between a local communicator (the ranks of this rank's host)
// and a cross communicator (the ranks of the other hosts with the same local index), so that the
// slow links between hosts carry 1/L of the buffer each and all of them work at once.
//
// Unlike the rest of this folder these compose whole collectives rather than pipes, so they take
// two Groups (below): core/transport's HierarchicalCommunicator passes its local and cross
// Communicators through a thin adapter, and any transport (TCP, shared memory, MPI) can serve
// either role. Same rules as algorithms.h: every rank calls with compatible arguments, errors come
// from the groups.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/dtype.h"

namespace hora {
namespace collectives {

// The whole collectives the hierarchical algorithms compose, over one connected group of ranks.
// The same contract as the Communicator methods of the same names (core/transport/communicator.h):
// blocking, one thread at a time, errors thrown. Declared here so that this folder does not
// depend on core/transport, which depends on it.
class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) = 0;
  virtual void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                         const std::vector<size_t>& recvBytes) = 0;
};

// Where one rank runs, as every rank reports it at start-up.
struct RankPlace {
  int host = 0;       // the host's index (the launcher's cross rank)
  int hostCount = 1;  // the launcher's cross size
  int hostRanks = 1;  // ranks on this rank's host (the launcher's local size)
};

// Groups of world ranks for the hierarchical path: hosts[h] lists host h's ranks, ascending.
struct HostGroups {
  std::vector<std::vector<int>> hosts;
  std::string whyNot;  // empty when the path applies; otherwise why the flat path runs
};

// A rank's view of the groups: its host, its index there (its local communicator rank), and the
// host of each rank of its cross communicator (the index-th rank of every host, in world order).
struct HostLayout {
  std::vector<std::vector<int>> hosts;
  int host = 0;
  int index = 0;
  std::vector<int> crossHosts;
};
HostLayout layoutFor(const HostGroups& groups, int worldRank);

// The hosts of a job from every rank's place, or why the hierarchical path cannot run there
// (a single host, or hosts with different numbers of ranks). The same on every rank.
HostGroups groupHosts(const std::vector<RankPlace>& places);

// Allreduce in three steps: a reduce-scatter inside the host (rank i of the host gets slice i,
// each element folded in local rank order), an allreduce of each slice across hosts on the cross
// communicator, and an allgather of the slices inside the host. Every rank ends with the same
// bytes; integer results equal the flat path's; floating-point sums are folded per host first, so
// they may differ from the flat path's rank order in the last bits, but they do not depend on
// fusion (each element's order depends only on the ranks). op is Sum, Min, Max or Product.
// scratch grows to hold the host's copies of this rank's slice.
void allreduceHierarchical(Group& local, Group& cross, void* buf, size_t count, DataType dtype,
                           ReduceOp op, std::vector<uint8_t>& scratch);

// Allgatherv in three steps: an allgather of the host's blocks inside the host, an allgather
// across hosts in which local rank i carries slice i of its host's blocks (so every cross link
// works at once), and an allgather inside the host of what each rank received; the pieces are
// then copied into world rank order. bytesPerRank is per world rank; in may alias this rank's
// block of out. scratch grows to hold the host's blocks and the pieces.
void allgathervHierarchical(Group& local, Group& cross, const HostLayout& layout, const void* in,
                            void* out, const std::vector<size_t>& bytesPerRank,
                            std::vector<uint8_t>& scratch);

}  // namespace collectives
}  // namespace hora
