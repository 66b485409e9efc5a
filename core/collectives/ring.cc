// The ring engine and the ring collectives built on it: allreduce, reduce-scatter, allgatherv.
#include "core/collectives/ring.h"

#include <algorithm>
#include <cstring>

#include "core/collectives/algorithm_table.h"
#include "core/collectives/algorithms.h"
#include "core/common/errors.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {
namespace {

// Walks a RingPlan. Holds the two cursors and the staging state of a reducing receive.
class RingRunner {
 public:
  RingRunner(Links& links, const RingPlan& plan)
      : links_(links), plan_(plan), steps_(plan.steps.size()), received_(steps_, 0) {
    for (size_t t = 0; t < steps_; ++t) {
      const RingStep& s = plan.steps[t];
      if (s.reduce) staging_ = links.scratch(kScratchRecv, kRecvStagingBytes);
      // A step forwards what the previous one received; anything else would deadlock or corrupt.
      HORA_CHECK(
          t == 0 || s.sendBlock < 0 || plan.steps[t - 1].recvBlock < 0 ||
              s.sendBlock == plan.steps[t - 1].recvBlock,
          "ring step " + std::to_string(t) + " sends a block the previous step did not receive");
    }
  }

  void run() {
    skipFinishedSends();
    skipFinishedRecvs();
    while (sendStep_ < steps_ || recvStep_ < steps_) {
      bool moved = false;
      if (recvStep_ < steps_) moved |= receiveSome();
      if (sendStep_ < steps_) moved |= sendSome();
      if (moved) continue;
      Links::Want wants[2];
      size_t n = 0;
      if (recvStep_ < steps_) wants[n++] = {plan_.recvPeer, false, true};
      if (sendStep_ < steps_ && sendPos_ < sendable(sendStep_)) {
        wants[n++] = {plan_.sendPeer, true, false};
      }
      HORA_CHECK(n > 0, "ring schedule cannot progress (send waits on a receive that never comes)");
      links_.waitAny(wants, n);
    }
  }

 private:
  size_t sendBytes(size_t t) const {
    int b = plan_.steps[t].sendBlock;
    return b < 0 ? 0 : plan_.blockBytes[b];
  }
  size_t recvBytes(size_t t) const {
    int b = plan_.steps[t].recvBlock;
    return b < 0 ? 0 : plan_.blockBytes[b];
  }

  // Bytes of step t's block that may be sent now: all of it, unless the previous step is still
  // receiving this very block; then whole segments of what has arrived.
  size_t sendable(size_t t) const {
    size_t len = sendBytes(t);
    if (t == 0 || plan_.steps[t - 1].recvBlock < 0) return len;
    size_t ready = received_[t - 1];
    if (ready >= len) return len;
    return ready - ready % kRingSegmentBytes;
  }

  void skipFinishedSends() {
    while (sendStep_ < steps_ && sendPos_ >= sendBytes(sendStep_)) {
      ++sendStep_;
      sendPos_ = 0;
    }
  }
  void skipFinishedRecvs() {
    while (recvStep_ < steps_ && received_[recvStep_] >= recvBytes(recvStep_)) ++recvStep_;
  }

  bool sendSome() {
    size_t limit = sendable(sendStep_);
    if (sendPos_ >= limit) return false;
    const RingStep& s = plan_.steps[sendStep_];
    const uint8_t* src = plan_.base + plan_.blockOffset[s.sendBlock] + sendPos_;
    size_t n = links_.trySend(plan_.sendPeer, src, limit - sendPos_);
    sendPos_ += n;
    skipFinishedSends();
    return n > 0;
  }

  bool receiveSome() {
    const RingStep& s = plan_.steps[recvStep_];
    size_t& done = received_[recvStep_];
    uint8_t* dst = plan_.base + plan_.blockOffset[s.recvBlock] + done;
    size_t remaining = recvBytes(recvStep_) - done;
    size_t n;
    if (!s.reduce) {
      n = links_.tryRecv(plan_.recvPeer, dst, remaining);
      done += n;
    } else {
      // Receive into staging, then reduce every whole element straight into the destination;
      // a split element waits at the front of staging for its remaining bytes.
      size_t want = std::min(remaining - staged_, kRecvStagingBytes - staged_);
      n = links_.tryRecv(plan_.recvPeer, staging_ + staged_, want);
      staged_ += n;
      size_t whole = staged_ / plan_.elementSize;
      if (whole > 0) {
        size_t wholeBytes = whole * plan_.elementSize;
        reduceInto(dst, staging_, whole, plan_.dtype, plan_.op);
        done += wholeBytes;
        staged_ -= wholeBytes;
        if (staged_ > 0) std::memmove(staging_, staging_ + wholeBytes, staged_);
      }
    }
    skipFinishedRecvs();
    return n > 0;
  }

  Links& links_;
  const RingPlan& plan_;
  size_t steps_;
  std::vector<size_t> received_;  // per step: bytes received (and reduced) so far
  size_t sendStep_ = 0;
  size_t sendPos_ = 0;
  size_t recvStep_ = 0;
  uint8_t* staging_ = nullptr;
  size_t staged_ = 0;
};

// Steps of a ring in which step t sends block (rank + shift - t) and receives the block one
// position behind, i.e. the block the left neighbour sends in the same step.
void addRingSteps(RingPlan* plan, int rank, int size, int shift, int count, bool reduce) {
  int first = static_cast<int>(plan->steps.size());
  for (int t = first; t < first + count; ++t) {
    RingStep s;
    s.sendBlock = wrapRank(rank + shift - t, size);
    s.recvBlock = wrapRank(rank + shift - t - 1, size);
    s.reduce = reduce;
    plan->steps.push_back(s);
  }
}

}  // namespace

void runRing(Links& links, const RingPlan& plan) { RingRunner(links, plan).run(); }

void splitEvenly(size_t count, int parts, size_t elementSize, std::vector<size_t>* offsets,
                 std::vector<size_t>* bytes) {
  offsets->assign(parts, 0);
  bytes->assign(parts, 0);
  size_t base = count / parts, extra = count % parts, at = 0;
  for (int i = 0; i < parts; ++i) {
    size_t n = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    (*offsets)[i] = at * elementSize;
    (*bytes)[i] = n * elementSize;
    at += n;
  }
}

void allreduceRing(Links& links, void* buf, size_t count, DataType dtype, ReduceOp op) {
  int n = links.size(), r = links.rank();
  if (n == 1 || count == 0) return;
  RingPlan plan;
  plan.sendPeer = wrapRank(r + 1, n);
  plan.recvPeer = wrapRank(r - 1, n);
  plan.base = static_cast<uint8_t*>(buf);
  plan.dtype = dtype;
  plan.op = op;
  plan.elementSize = dtypeSize(dtype);
  splitEvenly(count, n, plan.elementSize, &plan.blockOffset, &plan.blockBytes);
  // Reduce-scatter: with shift -1 the last receive (step n-2) completes block `rank` here.
  addRingSteps(&plan, r, n, -1, n - 1, true);
  // Allgather continues the same numbering: step n-1 sends block `rank`, fully reduced.
  addRingSteps(&plan, r, n, -1, n - 1, false);
  runRing(links, plan);
}

void reduceScatterRing(Links& links, const void* in, void* out, const std::vector<size_t>& counts,
                       DataType dtype, ReduceOp op) {
  int n = links.size(), r = links.rank();
  size_t es = dtypeSize(dtype);
  RingPlan plan;
  plan.blockOffset.resize(n);
  plan.blockBytes.resize(n);
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    plan.blockOffset[i] = total * es;
    plan.blockBytes[i] = counts[i] * es;
    total += counts[i];
  }
  if (n == 1) {
    if (total > 0) std::memmove(out, in, total * es);
    return;
  }
  if (total == 0) return;
  // The input is const: reduce in a working copy, then hand out this rank's block.
  plan.base = links.scratch(kScratchWork, total * es);
  std::memcpy(plan.base, in, total * es);
  plan.sendPeer = wrapRank(r + 1, n);
  plan.recvPeer = wrapRank(r - 1, n);
  plan.dtype = dtype;
  plan.op = op;
  plan.elementSize = es;
  addRingSteps(&plan, r, n, -1, n - 1, true);
  runRing(links, plan);
  if (plan.blockBytes[r] > 0) std::memcpy(out, plan.base + plan.blockOffset[r], plan.blockBytes[r]);
}

void allgathervRing(Links& links, const void* in, void* out,
                    const std::vector<size_t>& bytesPerRank) {
  int n = links.size(), r = links.rank();
  RingPlan plan;
  plan.base = static_cast<uint8_t*>(out);
  plan.blockOffset.resize(n);
  plan.blockBytes = bytesPerRank;
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    plan.blockOffset[i] = at;
    at += bytesPerRank[i];
  }
  uint8_t* mine = plan.base + plan.blockOffset[r];
  if (bytesPerRank[r] > 0 && mine != in) std::memmove(mine, in, bytesPerRank[r]);
  if (n == 1 || at == 0) return;
  plan.sendPeer = wrapRank(r + 1, n);
  plan.recvPeer = wrapRank(r - 1, n);
  // Step 0 sends this rank's own block; each later step forwards the block just received.
  addRingSteps(&plan, r, n, 0, n - 1, false);
  runRing(links, plan);
}

}  // namespace collectives
}  // namespace hora
