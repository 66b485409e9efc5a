#pragma once
// AgreementBoard: where the ranks of a job publish, round by round, which cached tensors they have
// ready, so that each rank decides by itself which of them run (core/coordinator/
// local_agreement.h), with no message to or from the coordinator. Only a transport whose ranks
// share memory offers one (shm/agreement_board.h).
//
// Round k of a rank: how many response batches it had applied, the cache slots it holds ready,
// the slots it handed to the coordinator instead, and whether it has joined (hvd.join()). A rank
// publishes round k + 1 only after it has read every rank's round k, so no rank is ever more than
// one round ahead of another and two buffers per rank (k & 1) suffice: a round is rewritten only
// once every rank has read it.
//
// A rank whose round holds a single slot, a small allreduce, may publish that tensor's data with
// it (the eager payload): when every rank did so for the same slot, each folds the payloads it read
// with the round instead of exchanging them once more (runAllreduce, core/ops/allreduce.cc).
//
// Threads: the background thread of each rank.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hora {

class AgreementBoard {
 public:
  // Cache slots the board carries: tensors cached in higher slots always go to the coordinator.
  static constexpr size_t kSlots = 1024;
  static constexpr size_t kWords = kSlots / 64;
  // The largest eager payload a round carries.
  static constexpr size_t kEagerBytes = 4096;

  struct Round {
    uint64_t applied = 0;              // response batches the rank had applied
    uint64_t joined = 0;               // 1 while the rank waits in a join
    uint64_t ready[kWords] = {};       // slots the rank holds ready
    uint64_t handedOver[kWords] = {};  // slots the rank sent to the coordinator, not yet done
    uint64_t eagerSlot = 0;            // slot + 1 whose data is in eager; 0 for none
    uint64_t eagerBytes = 0;
    uint8_t eager[kEagerBytes];  // left uninitialised: only its first eagerBytes are ever read
  };
  // A round's fields and the used part of its eager payload (a whole round is mostly payload),
  // between a Round and a board's own layout of one (shm/segment.h). The size is bounded by the
  // payload's room: a shared segment is written by other processes.
  template <typename From, typename To>
  static void copyRound(const From& from, To* to) {
    to->applied = from.applied;
    to->joined = from.joined;
    std::memcpy(to->ready, from.ready, sizeof(to->ready));
    std::memcpy(to->handedOver, from.handedOver, sizeof(to->handedOver));
    to->eagerSlot = from.eagerSlot;
    const uint64_t bytes = from.eagerSlot != 0 ? from.eagerBytes : 0;
    to->eagerBytes = bytes < sizeof(to->eager) ? bytes : sizeof(to->eager);
    if (to->eagerBytes > 0) std::memcpy(to->eager, from.eager, to->eagerBytes);
  }

  virtual ~AgreementBoard() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Publishes this rank's round `round` (one more than its last) and wakes the other ranks.
  virtual void publish(uint32_t round, const Round& mine) = 0;
  // The last round rank r published; 0 before its first.
  virtual uint32_t published(int r) const = 0;
  // Rank r's round `round`, which r has published and not yet been able to overwrite.
  virtual void read(int r, uint32_t round, Round* out) const = 0;
  // Called before the board is looked at: the transport's waits for control messages also end
  // when another rank publishes after this call.
  virtual void looked() = 0;
};

}  // namespace hora
