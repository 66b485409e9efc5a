#pragma once
// Transport-neutral collective algorithms as free functions over Links (see links.h), so every
// transport that can provide point-to-point pipes gets them; nothing here depends on a transport.
// Which one runs for a given op and size is decided in algorithm_table.h and applied in
// dispatch.h, not here.
//
// Common rules: ranks are Links ranks; every member calls the same function with compatible
// arguments; buffers are host memory and are not retained; errors come from Links (IoError,
// TimeoutError). Counts are elements, sizes ending in "bytes" are bytes. Size 1 and count 0 are
// handled (local copies only, or nothing).
#include <cstddef>
#include <vector>

#include "core/collectives/links.h"
#include "core/common/dtype.h"

namespace hora {
namespace collectives {

// One point-to-point transfer for runTransfers.
struct Transfer {
  int peer;
  bool send;
  void* data;
  size_t bytes;
  size_t done = 0;
};

// Progresses all transfers at once (full duplex: sends and receives overlap) until every one is
// complete. Transfers with the same peer and direction run one after another, in list order.
void runTransfers(Links& links, Transfer* transfers, size_t count);

// Latency-optimal allreduce: ceil(log2 N) rounds of pairwise exchange of the whole buffer; for N
// not a power of two the first 2*(N - 2^k) ranks fold pairwise before and unfold after.
void allreduceRecursiveDoubling(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
// Bandwidth-optimal allreduce: pipelined ring reduce-scatter followed by ring allgather.
void allreduceRing(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
// Allreduce that reduces every element in rank order, so results do not depend on the buffer's
// size or an element's position in it (see rank_ordered.cc).
void allreduceRankOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
// The same bits as allreduceRankOrdered through ring neighbours only: a pipelined chain 0 -> 1 ->
// ... -> n-1 folds each segment in rank order, and the finished segment goes on round the ring
// (see chain_ordered.cc). Two links per rank instead of n-1.
void allreduceChainOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);

// The same bits as allreduceRankOrdered in 2 ceil(log2 N) rounds through the ranks a power of two
// away: Bruck's exchange brings each rank its block of every buffer, it folds them in rank order,
// and a Bruck allgather spreads the folded blocks (see bruck_ordered.cc); for small blocks on many
// ranks.
void allreduceBruckOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
// The same result as allreduceRankOrdered in ceil(log2 N) rounds: every rank gathers every
// buffer and folds them in rank order (see gather_fold.cc); for small buffers.
void allreduceGatherFold(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op);
// Ring reduce-scatter with per-rank counts (zeros allowed). in holds sum(counts) elements; out
// receives this rank's block.
void reduceScatterRing(Links& links, const void* in, void* out, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op);
// Ring allgather of uneven blocks (zeros allowed). in may alias this rank's block of out.
void allgathervRing(Links& links, const void* in, void* out,
                    const std::vector<size_t>& bytesPerRank);
// The same in ceil(log2 N) rounds with the ranks a power of two away (bruck_allgather.cc), for the
// same bytes sent per rank; it stages the blocks in scratch kScratchRecv.
void allgathervBruck(Links& links, const void* in, void* out,
                     const std::vector<size_t>& bytesPerRank);
// Binomial-tree broadcast (small buffers).
void broadcastBinomial(Links& links, void* buf, size_t bytes, int root);
// Pipelined chain broadcast (large buffers): root -> root+1 -> ... in segments.
void broadcastChain(Links& links, void* buf, size_t bytes, int root);
// Pairwise exchange: in step s every rank sends to rank+s and receives from rank-s.
void alltoallvPairwise(Links& links, const void* in, const std::vector<size_t>& sendBytes,
                       void* out, const std::vector<size_t>& recvBytes);
// Bruck's exchange (bruck_alltoall.cc): ceil(log2 N) rounds with the ranks 2^k apart, so
// 2 ceil(log2 N) links per rank; each block crosses a link per set bit of its distance. IoError
// when a block that arrives is not the size recvBytes expects.
void alltoallvBruck(Links& links, const void* in, const std::vector<size_t>& sendBytes, void* out,
                    const std::vector<size_t>& recvBytes);
// Dissemination barrier: ceil(log2 N) rounds of one byte.
void barrierDissemination(Links& links);

}  // namespace collectives
}  // namespace hora
