#pragma once
// The collectives that have more than one algorithm, with the choice made here from
// algorithm_table.h, so every Links-based Communicator (TCP today, shared memory next) forwards
// to the same code and picks the same algorithm for the same op, size and group. The collectives
// with one algorithm are called directly (algorithms.h).
//
// Same rules as algorithms.h: every member calls with compatible arguments; errors come from
// Links. The callers check their arguments (reduce op, root) before calling.
#include <cstddef>
#include <vector>

#include "core/collectives/links.h"
#include "core/common/dtype.h"

namespace hora {
namespace collectives {

// op is Sum, Min, Max or Product.
void allreduce(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
void broadcast(Links& links, void* buf, size_t bytes, int root);
// in may alias this rank's block of out.
void allgatherv(Links& links, const void* in, void* out, const std::vector<size_t>& bytesPerRank);
// everyPairLinked: see chooseAlltoall.
void alltoallv(Links& links, const void* in, const std::vector<size_t>& sendBytes, void* out,
               const std::vector<size_t>& recvBytes, bool everyPairLinked);

}  // namespace collectives
}  // namespace hora
