#include "core/collectives/dispatch.h"

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"

namespace hora {
namespace collectives {

void allreduce(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  bool rankOrder = needsRankOrder(isFloating(dtype), op == ReduceOp::Sum || op == ReduceOp::Product,
                                  links.size());
  switch (chooseAllreduce(count * dtypeSize(dtype), count, links.size(), rankOrder)) {
    case AllreduceAlgorithm::Ring: allreduceRing(links, buf, count, dtype, op); break;
    case AllreduceAlgorithm::RankOrdered: allreduceRankOrdered(links, buf, count, dtype, op); break;
    case AllreduceAlgorithm::ChainOrdered:
      allreduceChainOrdered(links, buf, count, dtype, op);
      break;
    case AllreduceAlgorithm::BruckOrdered:
      allreduceBruckOrdered(links, buf, count, dtype, op);
      break;
    case AllreduceAlgorithm::GatherFold: allreduceGatherFold(links, buf, count, dtype, op); break;
    case AllreduceAlgorithm::SharedPayload:  // never chosen here: both need the shared segment
    case AllreduceAlgorithm::Window:
    case AllreduceAlgorithm::RecursiveDoubling:
      allreduceRecursiveDoubling(links, buf, count, dtype, op);
      break;
  }
}

void broadcast(Links& links, void* buf, size_t bytes, int root) {
  if (chooseBroadcast(bytes, links.size()) == BroadcastAlgorithm::Chain) {
    broadcastChain(links, buf, bytes, root);
  } else {
    broadcastBinomial(links, buf, bytes, root);
  }
}

void allgatherv(Links& links, const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  size_t total = 0;
  for (size_t b : bytesPerRank) total += b;
  if (chooseAllgather(total, links.size()) == AllgatherAlgorithm::Bruck) {
    allgathervBruck(links, in, out, bytesPerRank);
  } else {
    allgathervRing(links, in, out, bytesPerRank);
  }
}

void alltoallv(Links& links, const void* in, const std::vector<size_t>& sendBytes, void* out,
               const std::vector<size_t>& recvBytes, bool everyPairLinked) {
  if (chooseAlltoall(links.size(), everyPairLinked) == AlltoallAlgorithm::Bruck) {
    alltoallvBruck(links, in, sendBytes, out, recvBytes);
  } else {
    alltoallvPairwise(links, in, sendBytes, out, recvBytes);
  }
}

}  // namespace collectives
}  // namespace hora
