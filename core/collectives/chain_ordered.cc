// Allreduce in rank order over ring neighbours only: a pipelined chain. The buffer is cut in
// segments (chainSegmentBytes, algorithm_table.h). Rank 0 sends segment k to rank 1; rank r (0 < r
// < n-1) receives the fold of ranks 0..r-1 for segment k, folds its own in (acc = acc op mine, as
// allreduceRankOrdered folds, so the bits are the same) and forwards the result to r+1; rank n-1's
// fold is the final segment, which it sends on to rank 0 over the ring's wrap link, and which then
// travels 0 -> 1 -> ... -> n-2. Every rank talks only to r-1 and r+1 (mod n), so a job keeps two
// links per rank; a rank sends segment k while it receives k+1.
//
// A link r -> r+1 carries two streams: the running folds and, behind them, the finished segments
// coming round. Both ends order them the same way, by the step at which each would leave in an
// unhindered pipeline (fold k at step k, finished k at step n+k, relative to the sender), so
// every piece waits only on pieces of earlier steps and the chain cannot deadlock, however small
// the pipes: a receive never waits on a send (it folds or copies into the buffer at once).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"
#include "core/common/errors.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {
namespace {

// One segment on a link: the sender's running fold of it, or the finished segment.
struct Piece {
  size_t segment;
  bool finished;
};

// The pieces rank `sender` sends to sender+1, in the order both ends use. Ranks up to n-2 send
// their folds; rank n-1's fold is finished and goes to rank 0. Ranks up to n-3 also forward the
// finished segments, n steps behind the folds (a finished segment goes first on a tie: it is
// older).
std::vector<Piece> streamFrom(int sender, int n, size_t segments) {
  std::vector<Piece> out;
  const bool forwards = sender <= n - 3;
  const bool foldsFinished = sender == n - 1;
  size_t fold = 0, done = 0;
  const size_t lag = static_cast<size_t>(n);
  while (fold < segments || (forwards && done < segments)) {
    const bool finishedFirst =
        forwards && done < segments && (fold >= segments || done + lag <= fold);
    if (finishedFirst) {
      out.push_back({done++, true});
    } else {
      out.push_back({fold++, foldsFinished});
    }
  }
  return out;
}

class ChainRunner {
 public:
  ChainRunner(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op)
      : links_(links),
        n_(links.size()),
        r_(links.rank()),
        base_(static_cast<uint8_t*>(buf)),
        total_(count * dtypeSize(dtype)),
        elem_(dtypeSize(dtype)),
        dtype_(dtype),
        op_(op) {
    segBytes_ = chainSegmentBytes(total_, n_, elem_);
    const size_t segments = (total_ + segBytes_ - 1) / segBytes_;
    left_ = wrapRank(r_ - 1, n_);
    right_ = wrapRank(r_ + 1, n_);
    in_ = streamFrom(left_, n_, segments);
    out_ = streamFrom(r_, n_, segments);
    folded_.assign(segments, r_ == 0);
    finished_.assign(segments, false);
    if (segments > 0 && r_ != 0) staging_ = links.scratch(kScratchRecv, segBytes_);
  }

  void run() {
    while (recvAt_ < in_.size() || sendAt_ < out_.size()) {
      // Rank 0 first sends what it can. Its link from rank n-1 carries nothing before the chain
      // has folded a segment, and links open on first use with the lower rank waiting for the
      // higher one to dial (TCP): rank 0 receiving first would wait there for rank n-1, which
      // waits for the folds rank 0 has not sent.
      receiving_ = receiving_ || sendAt_ == out_.size() || !ready(out_[sendAt_]);
      bool moved = false;
      if (receiving_ && recvAt_ < in_.size()) moved |= receiveSome();
      if (sendAt_ < out_.size()) moved |= sendSome();
      if (moved) continue;
      Links::Want wants[2];
      size_t n = 0;
      if (receiving_ && recvAt_ < in_.size()) wants[n++] = {left_, false, true};
      if (sendAt_ < out_.size() && ready(out_[sendAt_])) wants[n++] = {right_, true, false};
      HORA_CHECK(n > 0, "rank-ordered chain cannot progress (a send waits on a segment never due)");
      links_.waitAny(wants, n);
    }
  }

 private:
  size_t bytesOf(size_t segment) const { return std::min(segBytes_, total_ - segment * segBytes_); }
  uint8_t* at(size_t segment) const { return base_ + segment * segBytes_; }
  bool ready(const Piece& p) const {
    return p.finished ? finished_[p.segment] : folded_[p.segment];
  }

  bool sendSome() {
    const Piece& p = out_[sendAt_];
    if (!ready(p)) return false;
    const size_t len = bytesOf(p.segment);
    size_t moved = links_.trySend(right_, at(p.segment) + sendPos_, len - sendPos_);
    sendPos_ += moved;
    if (sendPos_ == len) {
      ++sendAt_;
      sendPos_ = 0;
    }
    return moved > 0;
  }

  // A finished segment lands in place (this rank's fold of it has already left: the segment was
  // finished only after every rank after this one had received it). A fold lands in staging and
  // its whole elements are folded at once: staging = staging op mine, copied into the buffer.
  bool receiveSome() {
    const Piece& p = in_[recvAt_];
    const size_t len = bytesOf(p.segment);
    uint8_t* dst = p.finished ? at(p.segment) : staging_;
    size_t moved = links_.tryRecv(left_, dst + recvPos_, len - recvPos_);
    recvPos_ += moved;
    if (!p.finished) {
      const size_t whole = (recvPos_ - foldPos_) / elem_ * elem_;
      if (whole > 0) {
        reduceInto(staging_ + foldPos_, at(p.segment) + foldPos_, whole / elem_, dtype_, op_);
        std::memcpy(at(p.segment) + foldPos_, staging_ + foldPos_, whole);
        foldPos_ += whole;
      }
    }
    if (recvPos_ == len) {
      if (p.finished || r_ == n_ - 1) finished_[p.segment] = true;
      if (!p.finished) folded_[p.segment] = true;
      ++recvAt_;
      recvPos_ = 0;
      foldPos_ = 0;
    }
    return moved > 0;
  }

  Links& links_;
  const int n_, r_;
  uint8_t* const base_;
  const size_t total_, elem_;
  const DataType dtype_;
  const ReduceOp op_;
  size_t segBytes_ = 0;
  int left_ = 0, right_ = 0;
  std::vector<Piece> in_, out_;
  std::vector<bool> folded_;    // this rank's fold of the segment is in the buffer
  std::vector<bool> finished_;  // the finished segment is in the buffer
  uint8_t* staging_ = nullptr;
  bool receiving_ = r_ != 0;
  size_t recvAt_ = 0, recvPos_ = 0, foldPos_ = 0;
  size_t sendAt_ = 0, sendPos_ = 0;
};

}  // namespace

void allreduceChainOrdered(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (links.size() == 1 || count == 0) return;
  ChainRunner(links, buf, count, dtype, op).run();
}

}  // namespace collectives
}  // namespace hora
