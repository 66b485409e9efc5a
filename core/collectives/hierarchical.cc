// The hierarchical allreduce (local reduce-scatter, cross allreduce, local allgather) and the
// grouping of ranks into hosts it runs on.
#include "core/collectives/hierarchical.h"

#include <cstring>
#include <map>

#include "core/collectives/ring.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {

HostGroups groupHosts(const std::vector<RankPlace>& places) {
  HostGroups g;
  const int size = static_cast<int>(places.size());
  std::map<int, std::vector<int>> byHost;
  for (int r = 0; r < size; ++r) byHost[places[r].host].push_back(r);
  if (byHost.size() < 2) {
    g.whyNot = "every rank runs on one host";
    return g;
  }
  for (int r = 1; r < size; ++r) {
    if (places[r].hostRanks != places[0].hostRanks) {
      g.whyNot = "hosts run different numbers of ranks (rank 0's runs " +
                 std::to_string(places[0].hostRanks) + ", rank " + std::to_string(r) + "'s runs " +
                 std::to_string(places[r].hostRanks) + ")";
      return g;
    }
  }
  for (int r = 0; r < size; ++r) {
    const RankPlace& p = places[r];
    if (p.hostCount != static_cast<int>(byHost.size()) ||
        p.hostRanks != static_cast<int>(byHost.at(p.host).size())) {
      g.whyNot = "rank " + std::to_string(r) +
                 "'s local and cross sizes do not match the other ranks' cross ranks";
      return g;
    }
  }
  for (auto& entry : byHost) g.hosts.push_back(entry.second);
  return g;
}

void allreduceHierarchical(Communicator& local, Communicator& cross, void* buf, size_t count,
                           DataType dtype, ReduceOp op, std::vector<uint8_t>& scratch) {
  if (count == 0) return;
  const int n = local.size(), me = local.rank();
  const size_t es = dtypeSize(dtype);
  uint8_t* base = static_cast<uint8_t*>(buf);
  std::vector<size_t> offsets, bytes;
  splitEvenly(count, n, es, &offsets, &bytes);
  uint8_t* slice = base + offsets[me];
  const size_t sliceBytes = bytes[me];

  if (n > 1) {
    // Reduce-scatter: slice j goes to local rank j; this rank receives every host rank's copy of
    // its slice and folds them in rank order, so an element's result does not depend on where
    // it sits in the buffer (fused or not).
    scratch.resize(sliceBytes * n);
    std::vector<size_t> recvBytes(n, sliceBytes);
    local.alltoallv(base, bytes, scratch.data(), recvBytes);
    if (sliceBytes > 0) {
      std::memcpy(slice, scratch.data(), sliceBytes);
      for (int j = 1; j < n; ++j) {
        reduceInto(slice, scratch.data() + j * sliceBytes, sliceBytes / es, dtype, op);
      }
    }
  }
  // Every cross group holds the same slice on every host; each group reduces it at once.
  cross.allreduce(slice, sliceBytes / es, dtype, op);
  if (n > 1) local.allgatherv(slice, base, bytes);
}

}  // namespace collectives
}  // namespace hora
