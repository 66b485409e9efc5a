// Allreduce in rank order in 2 ceil(log2 N) rounds: the same bits as the rank-ordered allreduce
// (rank_ordered.cc; every element folded ((v0 op v1) op v2) ...), for jobs so large that its N - 1
// messages, or the chain's 2 (N - 1) hops in a row, cost more than the bytes.
//
// Block b of the buffer belongs to rank b, as in rank_ordered.cc. Bruck's exchange (as in
// bruck_alltoall.cc) brings block b of every rank to rank b in ceil(log2 N) rounds; rank b folds
// the N pieces in rank order; a Bruck allgather (bruck_allgather.cc) hands every rank every
// folded block in ceil(log2 N) rounds more. A rank talks only to the ranks a power of two away,
// and sends about B log2(N) / 2 + B bytes of a B-byte buffer against the chain's 2 B: the choice
// for small blocks on many ranks (algorithm_table.h).
//
// The exchange: slot j of a rank starts with its piece for rank r + j. In the round of distance
// d, the slots whose index has bit d set go to rank r + d and are replaced by what rank r - d
// held in them. Before that round, slot j of rank r holds a piece bound for rank
// r + j - (j mod d), and every piece for a rank has that rank's block size, so both sides know
// every size and each round is one message each way. At the end slot j holds rank r - j's piece.
#include <cstring>
#include <vector>

#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {
namespace {

// The pieces one rank holds during the exchange: slot j (piece bound for a rank that depends on
// j and the round) in a fixed-size cell, and buffers to pack one round's outgoing and incoming
// slots into one message each.
class PieceSlots {
 public:
  PieceSlots(Links& links, const std::vector<size_t>& blockBytes)
      : n_(links.size()), r_(links.rank()), blockBytes_(blockBytes), cell_(blockBytes[0]) {
    const size_t cells = static_cast<size_t>(n_) + 2 * static_cast<size_t>(n_ / 2 + 1);
    slots_ = links.scratch(kScratchWork, cells * cell_ + 1);
    out_ = slots_ + static_cast<size_t>(n_) * cell_;
    in_ = out_ + static_cast<size_t>(n_ / 2 + 1) * cell_;
  }

  uint8_t* slot(int j) { return slots_ + static_cast<size_t>(j) * cell_; }
  // Bytes of the piece in slot j of `rank` before the round of distance d.
  size_t pieceBytes(int rank, int j, int d) const {
    return blockBytes_[wrapRank(rank + j - j % d, n_)];
  }

  void round(Links& links, int d) {
    const int to = wrapRank(r_ + d, n_), from = wrapRank(r_ - d, n_);
    size_t sent = 0, expected = 0;
    for (int j = d; j < n_; ++j) {
      if ((j & d) == 0) continue;
      const size_t mine = pieceBytes(r_, j, d);
      std::memcpy(out_ + sent, slot(j), mine);
      sent += mine;
      expected += pieceBytes(from, j, d);
    }
    Transfer t[2] = {{to, true, out_, sent}, {from, false, in_, expected}};
    runTransfers(links, t, 2);
    size_t at = 0;
    for (int j = d; j < n_; ++j) {
      if ((j & d) == 0) continue;
      const size_t theirs = pieceBytes(from, j, d);
      std::memcpy(slot(j), in_ + at, theirs);
      at += theirs;
    }
  }

 private:
  const int n_, r_;
  const std::vector<size_t>& blockBytes_;
  const size_t cell_;  // the largest block (block 0)
  uint8_t* slots_;
  uint8_t* out_;
  uint8_t* in_;
};

}  // namespace

void allreduceBruckOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  const int n = links.size(), r = links.rank();
  if (n == 1 || count == 0) return;
  const size_t elem = dtypeSize(dtype);
  std::vector<size_t> offsets, bytes;
  splitEvenly(count, n, elem, &offsets, &bytes);
  auto* base = static_cast<uint8_t*>(buf);
  PieceSlots pieces(links, bytes);
  for (int j = 0; j < n; ++j) {
    const int to = wrapRank(r + j, n);
    std::memcpy(pieces.slot(j), base + offsets[to], bytes[to]);
  }
  for (int d = 1; d < n; d *= 2) pieces.round(links, d);
  // Slot j holds rank r - j's piece of block r: fold them in rank order, into rank 0's piece.
  const size_t m = bytes[r] / elem;
  if (m > 0) {
    uint8_t* acc = pieces.slot(wrapRank(r, n));
    for (int p = 1; p < n; ++p) reduceInto(acc, pieces.slot(wrapRank(r - p, n)), m, dtype, op);
    std::memcpy(base + offsets[r], acc, bytes[r]);
  }
  allgathervBruck(links, base + offsets[r], base, bytes);
}

}  // namespace collectives
}  // namespace hora
