#pragma once
// LocalAgreement: cached tensors of the global process set agreed on by every rank for itself, with
// no round trip to the coordinator, when the transport offers an agreement board
// (core/transport/agreement_board.h; ranks on one host).
//
// A rank holds the cache slots it has ready and publishes them in rounds. Once every rank has
// published round k, each rank reads all of round k and runs, in slot order, the slots every rank
// holds, provided every rank had applied the same number of response batches (the same batches
// give every rank the same cache, so a slot names the same tensor on all). All ranks read the same
// round, so all decide the same. A rank publishes a round when it holds new slots (at once when
// it held nothing published, else at most once per cycle, so a burst fuses), when another rank
// started one (at once while it holds slots, else after up to a cycle, since an empty-handed round
// agrees on nothing), or when its batch count or hand-overs changed while it holds slots.
//
// Ordering against the coordinator's batches, which must interleave the same way on every rank:
// - world rank 0 builds no batch while its own round is open (published, not yet resolved), and
//   builds what it can before it joins another round, so back-to-back rounds never hold it up;
// - a rank about to apply a batch first resolves its open round when every rank published it. If
//   some rank has not, the round can run nothing: rank 0 built that batch before publishing the
//   round (the rule above), so rank 0 will publish a larger batch count than this rank did.
//
// A rank that joined (hvd.join()) holds nothing more and says so in its rounds: while one has, the
// others hand every slot over at once, since only the coordinator runs a collective without it.
//
// A round that stays open for openBound (HORA_TIMEOUT_SECONDS) fails the rank with TimeoutError
// naming the ranks that never published it: a stopped or hung peer cannot block it for ever.
//
// A rank that holds one slot alone publishes that tensor's data with the round when hold() was
// given it (the eager payload: a small allreduce, core/ops/ops.h foldsFromPayloads). When every
// rank published one for the slot that runs, the outcome lends the round's payloads, and each rank
// folds them instead of exchanging the data again: one wait per blocking call instead of two.
//
// A slot held for handOverAfter, or that another rank handed over, goes to the coordinator
// instead (its stall inspector, deadlock check and join handling see only what reaches it), and
// the rank publishes it as handed over until that tensor completes, so that the others send
// theirs too. A slot is never both held and sent: a hand-over happens only outside an open round.
//
// Background thread only, or a thread that holds its loop's drive lock
// (core/runtime/background_loop.h).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/common/bits.h"
#include "core/common/time.h"
#include "core/transport/agreement_board.h"

namespace hora {

// The data a held slot may publish with its round: `bytes` (at most kEagerBytes) at `data`,
// copied by hold(); null for none.
struct EagerPayload {
  const void* data = nullptr;
  size_t bytes = 0;
};

class LocalAgreement {
 public:
  // handOverAfter: how long a held slot waits for the other ranks before it goes to the
  // coordinator (Settings::agreementHandOverMs); openBound: how long a round may stay open.
  LocalAgreement(std::unique_ptr<AgreementBoard> board, Millis handOverAfter, Millis openBound);

  // Whether a tensor of the global set cached in `slot` can be agreed on here.
  static bool accepts(int slot) { return slot >= 0 && slot < int(AgreementBoard::kSlots); }
  void hold(int slot, const std::string& key, Clock::time_point now, EagerPayload eager = {});

  struct Outcome {
    // Per round resolved, the slots every rank held: run them now, in this order. Each round is
    // fused on its own, as every other rank fuses it.
    std::vector<std::vector<int>> ready;
    // Per round in ready: every rank's eager payload, in rank order, when every rank published
    // one for the lone slot it runs; else empty. Valid until the second resolve after this one.
    std::vector<std::vector<const uint8_t*>> payloads;
    std::vector<int> handOver;  // slots to send to the coordinator now
  };
  // One look at the board: resolves the open round if every rank published it, hands over what
  // waited too long, and publishes the next round when due. applied: batches applied so far.
  Outcome step(uint64_t applied, Clock::time_point now, Millis cycle);
  // Published and not yet resolved: rank 0 builds no batch meanwhile.
  bool open() const { return open_; }
  // Open, and every rank published it (then resolve() before applying a batch).
  bool resolvable() const;
  Outcome resolve();

  // This rank entered a join (true), or every rank left it (false: the join's response, which
  // ends it on every rank at once); published with the next round.
  void setJoined(bool joined);
  // The coordinator evicted the slot: what was held there is resent in full, by the participant.
  // True when a held tensor was dropped.
  bool evicted(int slot);
  // The tensor completed (or failed): it is no longer handed over.
  void finished(const std::string& key);
  // Slots held (the participant counts them as sent; the coordinator does not know them).
  size_t held() const { return heldCount_; }
  // How long until step() has something to do by itself (hand over, publish delayed news, or fail
  // an open round); negative when nothing but another rank's round can give it work.
  Millis untilDue(Clock::time_point now, Millis cycle) const;
  // Throws TimeoutError when the open round has waited openBound for the ranks it names.
  void failIfStalled(Clock::time_point now) const;
  // This rank ran collectives for `d` (the peers were busy with the same): not waiting time.
  void paused(Clock::duration d) {
    if (open_) openedAt_ += d;
  }

 private:
  struct Held {
    std::string key;
    Clock::time_point since;
    bool published = false;
    // The tensor's data to publish with the round, copied when held: the tensor's buffer may
    // be gone by the time a round is published (a failed job's caller returns at once).
    bool eager = false;
    std::vector<uint8_t> eagerData;  // its buffer is kept for the slot's next tensor
  };

  void publish(uint64_t applied, Clock::time_point now);
  // The eager payloads of the round in `rounds` that agreed on `slots`, or none.
  static std::vector<const uint8_t*> eagerPayloads(const std::vector<AgreementBoard::Round>& rounds,
                                                   const std::vector<int>& slots);
  void handOver(int slot, Outcome& out);
  bool othersAhead() const;
  bool joinsOthers(Clock::time_point now, Millis cycle);
  bool isHeld(int slot) const { return bitSet(heldBits_, static_cast<size_t>(slot)); }
  void release(int slot);
  // Calls f(slot) for every slot held, in slot order; f may release the slot it is given.
  template <typename F>
  void forEachHeld(F&& f) const {
    forEachSetBit(heldBits_, kWords, [&](size_t bit) { f(static_cast<int>(bit)); });
  }
  static constexpr size_t kWords = AgreementBoard::kWords;

  std::unique_ptr<AgreementBoard> board_;
  Millis handOverAfter_;
  Millis openBound_;
  Clock::time_point openedAt_{};
  // By slot, where heldBits_ is set: a slot's entry keeps its key's buffer for the next tensor
  // held there, so holding allocates nothing once a slot was used.
  std::vector<Held> held_;
  uint64_t heldBits_[kWords] = {};
  size_t heldCount_ = 0;
  std::map<int, std::string> handedOver_;  // slot -> key, until that tensor completes
  uint32_t round_ = 0;                     // the last round this rank published
  bool open_ = false;
  uint64_t publishedApplied_ = 0;
  bool handOverNews_ = false;  // hand-overs not yet published
  bool joined_ = false;
  bool joinNews_ = false;      // a change of joined_ not yet published
  bool othersJoined_ = false;  // some rank had joined in the last round resolved
  Clock::time_point lastPublish_{};
  // Since when another rank's round waits for this one while it holds nothing (joinsOthers()).
  std::optional<Clock::time_point> aheadSince_;
  AgreementBoard::Round mine_;  // the round being published (a member: it is mostly payload)
  // Scratch: every rank's round being resolved, in turns, so that the payloads an outcome lends
  // outlive the resolve that step() may run after the one that made them.
  std::vector<AgreementBoard::Round> rounds_[2];
  size_t turn_ = 0;
};

}  // namespace hora
